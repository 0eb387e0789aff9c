package wire

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
)

// A topology object means the same wherever it comes: a training entry's
// prefill_topology or decode_topology and a /predict/pairs candidate's
// topology are read by one decoder, so they give the same placement and
// the same errors, at the same place under the object.
func TestTopologyDecodesAlikeEverywhere(t *testing.T) {
	for _, tc := range []struct {
		name, topology string
		want           features.Topology // when accepted
		errs           []string          // "type at label", in order
	}{
		{name: "every label", topology: `{"node":"n9","rack":"r1","zone":"z","region":"eu"}`,
			want: features.Topology{Node: "n9", Rack: "r1", Zone: "z", Region: "eu"}},
		{name: "null labels are absent", topology: `{"node":"n9","rack":null,"zone":null}`, want: features.Topology{Node: "n9"}},
		{name: "unknown keys are ignored", topology: `{"node":"n9","gpu":{"x":[1]}}`, want: features.Topology{Node: "n9"}},
		{name: "a null node, then a node", topology: `{"node": null, "node": "n9"}`, errs: []string{"duplicate_key at node"}},
		{name: "a node, then a null node", topology: `{"node": "n9", "node": null}`, errs: []string{"duplicate_key at node"}},
		{name: "a label twice", topology: `{"node":"n0","rack":"a","rack":"b"}`, errs: []string{"duplicate_key at rack"}},
		{name: "no node", topology: `{"rack":"r1"}`, errs: []string{"missing at node"}},
		{name: "empty", topology: `{}`, errs: []string{"missing at node"}},
		{name: "a null node", topology: `{"node":null}`, errs: []string{"missing at node"}},
		{name: "labels are strings", topology: `{"node":"n0","rack":7}`, errs: []string{"string_type at rack"}},
		{name: "a bad node is not also missing", topology: `{"node":7}`, errs: []string{"string_type at node"}},
		{name: "labels are not empty", topology: `{"node":""}`, errs: []string{"string_too_short at node"}},
		{name: "labels are at most 63 characters", topology: `{"node":"n0","zone":"` + strings.Repeat("z", 64) + `"}`,
			errs: []string{"string_too_long at zone"}},
		{name: "every error", topology: `{"rack":1,"zone":"a","zone":"b"}`,
			errs: []string{"string_type at rack", "duplicate_key at zone", "missing at node"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// As a training entry's decode_topology.
			entry, errs := DecodeEntry([]byte(object(transferEntry, "decode_topology", tc.topology)))
			checkErrors(t, errs)
			entryErrs := topologyErrors(errs, []any{"body", "decode_topology"})
			// As a /predict/pairs decode candidate's topology.
			body := pairsBody(map[string]string{"decode": `[{"pod":"d-0","topology":` + tc.topology +
				`,"kv_cache_percentage":0.5,"num_request_waiting":2,"num_request_running":7,"prefix_cache_score":0.25}]`})
			req, errs := DecodePairsRequest([]byte(body), 0)
			checkErrors(t, errs)
			pairsErrs := topologyErrors(errs, []any{"body", "decode", 0, "topology"})
			if !reflect.DeepEqual(entryErrs, pairsErrs) {
				t.Errorf("a training entry's topology: %v; a pairs candidate's: %v", entryErrs, pairsErrs)
			}
			for where, got := range map[string][]string{"training entry": entryErrs, "pairs candidate": pairsErrs} {
				if !reflect.DeepEqual(got, tc.errs) && (len(got) > 0 || len(tc.errs) > 0) {
					t.Errorf("%s: errors %v, want %v", where, got, tc.errs)
				}
			}
			if tc.errs != nil {
				return
			}
			if entry.Transfer == nil || entry.Transfer.Decode != tc.want {
				t.Errorf("training entry's decode placement %+v, want %+v", entry.Transfer, tc.want)
			}
			if len(req.Decode) != 1 || req.Decode[0].Topology != tc.want {
				t.Errorf("pairs candidate's placement %+v, want %+v", req.Decode, tc.want)
			}
		})
	}
}

// topologyErrors lists the errors under the topology object at loc as
// "type at label", and any other error as "type at loc".
func topologyErrors(errs []FieldError, loc []any) []string {
	var out []string
	for _, e := range errs {
		if len(e.Loc) == len(loc)+1 && reflect.DeepEqual(e.Loc[:len(loc)], loc) {
			out = append(out, fmt.Sprintf("%s at %v", e.Type, e.Loc[len(loc)]))
			continue
		}
		out = append(out, fmt.Sprintf("%s at %v", e.Type, e.Loc))
	}
	return out
}
