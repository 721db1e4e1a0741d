package httpapi

import (
	_ "embed"
	"net/http"
)

// openAPIDoc is the OpenAPI 3.1 description of this API. It is the source,
// edited by hand next to the handlers; the API tests validate every request
// they make and every answer they get against it, so it cannot drift.
//
//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the OpenAPI 3.1 document served at GET /v1/openapi.json.
func OpenAPI() []byte { return append([]byte(nil), openAPIDoc...) }

// openAPI serves the document, to any valid token, as every call under /v1.
func (a *api) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDoc)
}
