package httpapi

import (
	"bytes"
	"reflect"
	"testing"
)

// The one-pass scanner and the encoding/json decoder must agree on every
// input: same fields, same raw values (modulo surrounding space), and both
// refusing what one refuses.
func FuzzDecodeObjectMatchesDecoder(f *testing.F) {
	for _, s := range []string{
		`{"application":"order","business_id":"o-1","delay":"30m"}`,
		`{"payload":"{\"a\":[1,2,{\"b\":\"}\"}]}","ring_at":"2026-01-01T00:00:00Z"}`,
		` { "max_attempts" : 3 , "latest_ring_at" : null } `,
		`{"\u0061pplication":"x"}`, `{"Application":"x"}`, `{"delay":1,"delay":2}`,
		`{}`, `[]`, `{"a":1}`, `{"payload":"\\"}`, `{"ring_at":"x"} {}`, `{"payload":"é\u00e9"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, slow createBody
		errFast := decodeObject(data, fast.field)
		errSlow := decodeObjectSlow(data, slow.field)
		if (errFast == nil) != (errSlow == nil) {
			t.Fatalf("%q: scanner error %v, decoder error %v", data, errFast, errSlow)
		}
		if errFast != nil {
			return
		}
		pairs := [][2][]byte{
			{fast.Application, slow.Application}, {fast.BusinessID, slow.BusinessID}, {fast.Payload, slow.Payload},
			{fast.ContentType, slow.ContentType}, {fast.RingAt, slow.RingAt}, {fast.Delay, slow.Delay},
			{fast.LatestRingAt, slow.LatestRingAt}, {fast.MaxAttempts, slow.MaxAttempts},
		}
		for i, p := range pairs {
			if (p[0] == nil) != (p[1] == nil) || !bytes.Equal(bytes.TrimSpace(p[0]), bytes.TrimSpace(p[1])) {
				t.Fatalf("%q: field %d: scanner %q, decoder %q", data, i, p[0], p[1])
			}
		}
	})
}

// An item of a batch is decoded without a second json.Valid: it must be
// judged exactly as the same JSON sent alone to POST /v1/clocks would be.
func FuzzBatchItemMatchesCreate(f *testing.F) {
	for _, s := range []string{
		`{"clocks":[{"application":"order","business_id":"o-1","delay":"30m"}]}`,
		`{"clocks":[ {"application":"a","business_id":"b","ring_at":"2026-01-01T00:00:00Z","payload":"{}"} , 3, "x", [], null, {} ]}`,
		`{"clocks":[{"application":"a","application":"b"},{"Delay":"1s"},{"delay":1e999}]}`,
		`{"clocks":[{"business_id":"\ud800","delay":"1s","application":"a"}]}`,
		`{"clocks":[{"application":"a","business_id":"b","schedule":"@every 1m","misfire":"skip"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := decodeBatch(data)
		if err != nil {
			return
		}
		for _, item := range b.Clocks {
			got, gotErr := decodeBatchItem(item)
			want, wantErr := decodeCreateInput(item)
			if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
				t.Fatalf("item %q: batch error %v, create error %v", item, gotErr, wantErr)
			}
			if gotErr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("item %q: batch %+v, create %+v", item, got, want)
			}
		}
	})
}
