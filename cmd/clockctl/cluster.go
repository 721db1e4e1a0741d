package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/clockd/clockd/client"
	"github.com/clockd/clockd/internal/httpapi"
)

func clusterCommand() command {
	return command{
		name:    "cluster",
		summary: "show the clockd instances and their shards",
		help: `
Usage: clockctl cluster [-json]

Shows the clockd instances that share the database and the shards each one
owns (GET /v1/cluster). Without -json the answer is shown as a table when it
has the form {"instances":[{"id":...,"shards":[...]},...]}, as JSON otherwise.

Examples:
  clockctl cluster
  clockctl -addr http://clockd-2:8080 cluster -json
`,
		setup: func(c *cli, fs *flag.FlagSet) runFunc {
			var asJSON bool
			fs.BoolVar(&asJSON, "json", false, "print the answer as JSON")
			return func(ctx context.Context, pos []string) error {
				if len(pos) > 0 {
					return usagef("unexpected argument %q", pos[0])
				}
				cl, err := c.client()
				if err != nil {
					return err
				}
				_, data, err := cl.do(ctx, http.MethodGet, "/v1/cluster", nil, nil)
				if err != nil {
					var ae *client.Error
					if errors.As(err, &ae) && ae.Code == "" &&
						(ae.Status == http.StatusNotFound || ae.Status == http.StatusMethodNotAllowed) {
						return fmt.Errorf("%w (this clockd does not seem to serve GET /v1/cluster)", err)
					}
					return err
				}
				if !asJSON && printClusterTable(c.stdout, data) {
					return nil
				}
				return printJSON(c.stdout, data)
			}
		},
	}
}

// printClusterTable prints the instances and their shards as a table and
// reports whether the answer had the form of httpapi.ClusterView.
func printClusterTable(w io.Writer, data []byte) bool {
	var v httpapi.ClusterView
	if json.Unmarshal(data, &v) != nil || v.Instances == nil {
		return false
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tADDR\tLIVE\tCOUNT\tSHARDS\tLEASES UNTIL")
	for _, in := range v.Instances {
		shards := make([]int, len(in.Shards))
		until := ""
		for i, sh := range in.Shards {
			shards[i] = sh.Shard
			if until == "" || sh.LeaseUntil < until {
				until = sh.LeaseUntil // the earliest expiry
			}
		}
		if until == "" {
			until = "-"
		}
		live := "yes"
		if !in.Live {
			live = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", in.InstanceID, in.HTTPAddr, live, len(shards), shardRanges(shards), until)
	}
	if err := tw.Flush(); err != nil {
		return false
	}
	fmt.Fprintf(w, "%d shards; unowned: %s (database time %s)\n", v.ShardCount, shardRanges(v.Unowned), v.Now)
	return true
}

// shardRanges writes shard numbers compactly: [0 1 2 5 7 8] -> "0-2,5,7-8".
func shardRanges(shards []int) string {
	if len(shards) == 0 {
		return "-"
	}
	s := append([]int(nil), shards...)
	sort.Ints(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] <= s[j]+1 {
			j++
		}
		if s[i] == s[j] {
			parts = append(parts, strconv.Itoa(s[i]))
		} else {
			parts = append(parts, strconv.Itoa(s[i])+"-"+strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
