package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/httpapi"
)

func tokenCommand() command {
	return command{
		name:    "token",
		summary: "create, list or revoke API tokens (admin token needed)",
		help: `
Usage:
  clockctl token create -app APP -scopes read,write [-name TEXT]
  clockctl token create -admin [-name TEXT]
  clockctl token list [-app APP] [-json]
  clockctl token revoke ID

Manages the API tokens of clockd (POST, GET /v1/tokens, DELETE
/v1/tokens/ID); it needs a token of the admin kind (-token or CLOCKD_TOKEN).
create prints the new token's secret alone on stdout: it is shown only
once. A token of an application may use that application's clocks: read
(get, list), write (create, batch, cancel, reschedule, replay). Revoking
stops a token at once on every instance the broker reaches (within
auth.cache_ttl, 5s, on one it does not). The very first admin token is made
without the API: clockd token create --admin.

Examples:
  export CLOCKD_TOKEN=clk_...                     # an admin token
  clockctl token create -app order -scopes read,write -name order-service
  clockctl token list -app order
  clockctl token revoke 7
`,
		setup: func(c *cli, fs *flag.FlagSet) runFunc {
			var (
				app, scopes, name string
				admin, asJSON     bool
			)
			fs.StringVar(&app, "app", "", "create: the `application` of the token; list: only its tokens")
			fs.StringVar(&scopes, "scopes", "", "create: comma-separated `scopes` (read, write)")
			fs.StringVar(&name, "name", "", "create: free `text` to tell the token apart")
			fs.BoolVar(&admin, "admin", false, "create: a token of the admin kind")
			fs.BoolVar(&asJSON, "json", false, "list: print the answer as JSON")
			return func(ctx context.Context, pos []string) error {
				if len(pos) == 0 {
					return usagef("give create, list or revoke")
				}
				sub, pos := pos[0], pos[1:]
				cl, err := c.client()
				if err != nil {
					return err
				}
				switch sub {
				case "create":
					if len(pos) > 0 {
						return usagef("unexpected argument %q", pos[0])
					}
					body := map[string]any{}
					if admin {
						if app != "" || scopes != "" {
							return usagef("-admin takes no -app or -scopes: an admin token may do everything")
						}
						body["admin"] = true
					} else {
						if app == "" {
							return usagef("-app is required (or -admin)")
						}
						if err := alarm.CheckApplication(app); err != nil {
							return usagef("-app %q: %v", app, err)
						}
						var ss []string
						for _, s := range strings.Split(scopes, ",") {
							if s = strings.TrimSpace(s); s != "" {
								ss = append(ss, s)
							}
						}
						if len(ss) == 0 {
							return usagef("-scopes is required: read, write or read,write")
						}
						body["application"], body["scopes"] = app, ss
					}
					if name != "" {
						body["name"] = name
					}
					_, data, err := cl.do(ctx, http.MethodPost, "/v1/tokens", nil, body)
					if err != nil {
						return err
					}
					var t httpapi.Token
					if err := json.Unmarshal(data, &t); err != nil || t.Secret == "" {
						return fmt.Errorf("unexpected answer: %s", data)
					}
					fmt.Fprintln(c.stderr, describeToken(t)+"; its secret, shown only now:")
					fmt.Fprintln(c.stdout, t.Secret)
					return nil
				case "list":
					if len(pos) > 0 {
						return usagef("unexpected argument %q", pos[0])
					}
					q := url.Values{}
					if app != "" {
						q.Set("application", app)
					}
					_, data, err := cl.do(ctx, http.MethodGet, "/v1/tokens", q, nil)
					if err != nil {
						return err
					}
					if asJSON {
						return printJSON(c.stdout, data)
					}
					var ans struct {
						Tokens []httpapi.Token `json:"tokens"`
					}
					if err := json.Unmarshal(data, &ans); err != nil {
						return printJSON(c.stdout, data)
					}
					printTokenTable(c.stdout, ans.Tokens)
					return nil
				case "revoke":
					if len(pos) != 1 {
						return usagef("give one token id")
					}
					id, err := strconv.ParseInt(pos[0], 10, 64)
					if err != nil || id <= 0 {
						return usagef("%q is not a token id", pos[0])
					}
					_, data, err := cl.do(ctx, http.MethodDelete, "/v1/tokens/"+strconv.FormatInt(id, 10), nil, nil)
					if err != nil {
						return err
					}
					var t httpapi.Token
					if err := json.Unmarshal(data, &t); err != nil {
						return printJSON(c.stdout, data)
					}
					fmt.Fprintf(c.stdout, "token %d revoked\n", t.ID)
					return nil
				}
				return usagef("unknown token command %q (create, list, revoke)", sub)
			}
		},
	}
}

func describeToken(t httpapi.Token) string {
	if t.Admin {
		return fmt.Sprintf("token %d created (admin)", t.ID)
	}
	app := ""
	if t.Application != nil {
		app = *t.Application
	}
	return fmt.Sprintf("token %d created (application %s, scopes %s)", t.ID, app, strings.Join(t.Scopes, ","))
}

func printTokenTable(w io.Writer, ts []httpapi.Token) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tAPPLICATION\tSCOPES\tPREFIX\tNAME\tCREATED\tLAST USED\tREVOKED")
	opt := func(s *string) string {
		if s == nil {
			return "-"
		}
		return *s
	}
	for _, t := range ts {
		kind := "app"
		if t.Admin {
			kind = "admin"
		}
		app := opt(t.Application)
		if t.Admin {
			app = "*"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, kind, app, strings.Join(t.Scopes, ","), t.Prefix,
			t.Name, t.CreatedAt, opt(t.LastUsedAt), opt(t.RevokedAt))
	}
	tw.Flush()
}

func quotaCommand() command {
	return command{
		name:    "quota",
		summary: "show or set an application's quota (admin token needed)",
		help: `
Usage:
  clockctl quota APP
  clockctl quota APP [-max-live N] [-rate N] [-max-payload N]

Shows an application's quota (GET /v1/applications/APP/quota) or, with any
of the flags, sets it (PUT; the flags not given keep their current values).
0 means no limit. Over a quota, creates answer 429 with Retry-After and
nothing is written.

Examples:
  clockctl quota order
  clockctl quota order -max-live 100000 -rate 500 -max-payload 16384
`,
		setup: func(c *cli, fs *flag.FlagSet) runFunc {
			var live, rate, payload int
			fs.IntVar(&live, "max-live", 0, "most pending or firing clocks (`n`, 0 = no limit)")
			fs.IntVar(&rate, "rate", 0, "most creates per second per clockd instance (`n`, 0 = no limit)")
			fs.IntVar(&payload, "max-payload", 0, "largest payload in bytes (`n`, 0 = only the server's limit)")
			return func(ctx context.Context, pos []string) error {
				if len(pos) != 1 {
					return usagef("give one application")
				}
				app := pos[0]
				if err := alarm.CheckApplication(app); err != nil {
					return usagef("%q: %v", app, err)
				}
				cl, err := c.client()
				if err != nil {
					return err
				}
				path := "/v1/applications/" + url.PathEscape(app) + "/quota"
				_, data, err := cl.do(ctx, http.MethodGet, path, nil, nil)
				if err != nil {
					return err
				}
				set := setFlags(fs)
				if len(set) == 0 {
					return printJSON(c.stdout, data)
				}
				var q httpapi.Quota
				if err := json.Unmarshal(data, &q); err != nil {
					return fmt.Errorf("unexpected answer: %s", data)
				}
				body := map[string]int{"max_live_clocks": q.MaxLiveClocks, "creates_per_second": q.CreatesPerSecond,
					"max_payload_bytes": q.MaxPayloadBytes}
				if set["max-live"] {
					body["max_live_clocks"] = live
				}
				if set["rate"] {
					body["creates_per_second"] = rate
				}
				if set["max-payload"] {
					body["max_payload_bytes"] = payload
				}
				_, data, err = cl.do(ctx, http.MethodPut, path, nil, body)
				if err != nil {
					return err
				}
				return printJSON(c.stdout, data)
			}
		},
	}
}
