package suite

import (
	"slices"
	"strings"
	"testing"
)

func TestParseManifestRejects(t *testing.T) {
	good, err := Default().Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseManifest(good); err != nil {
		t.Fatalf("the default manifest: %v", err)
	}
	for _, c := range []struct {
		name, from, to, want string
	}{
		{"unknown field", `"version": 1,`, `"version": 1, "held_out": [],`, "unknown field"},
		{"version", `"version": 1,`, `"version": 2,`, "version 2"},
		{"no seeds", `"seeds": 3`, `"seeds": 0`, "seeds 0"},
		{"duplicate name", `"name": "prefill-bound"`, `"name": "decode-bound"`, "listed twice"},
		{"path as name", `"name": "prefill-bound"`, `"name": "../prefill-bound"`, "plain file stem"},
		{"router", `"router": "load-prefix"`, `"router": "fastest"`, "router"},
		{"held-out regime without trace", `"pd-pool"
  ]`, `"pd-poll"
  ]`, "has no trace"},
		{"p/d router on a monolithic trace", `"router": "load-prefix"`, `"router": "greedy"`, "router"},
		{"monolithic router on a p/d trace", `"router": "greedy"`, `"router": "least-queue"`, "p/d router"},
		{"p/d layout", `"layout": "zones"`, `"layout": "galaxy"`, "layout"},
		{"p/d pods and fleet servers disagree", `"servers": 8`, `"servers": 9`, "prefill_pods + decode_pods"},
		{"p/d no decode pods", `"decode_pods": 4`, `"decode_pods": 0`, "decode"},
		{"p/d split threshold", `"split_threshold": 256`, `"split_threshold": -1`, "split_threshold"},
		{"p/d link order", `"class": "same-node"`, `"class": "same-rack"`, "want same-node"},
		{"p/d link bandwidth", `"bytes_per_sec": 360000000000`, `"bytes_per_sec": 0`, "bandwidth"},
		{"p/d kv bytes", `"kv_bytes_per_token": 262144`, `"kv_bytes_per_token": -1`, "kv_bytes_per_token"},
		{"p/d failure rate", `"prefill_failure_rate": 0.01`, `"prefill_failure_rate": 2`, "prefill_failure_rate"},
		{"workload kind", `"kind": "agentic"`, `"kind": "batch"`, "workload kind"},
		{"no requests", `"requests": 900`, `"requests": -1`, "requests"},
		{"bad fleet", `"servers": 2`, `"servers": 0`, "servers"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := strings.Replace(string(good), c.from, c.to, 1)
			if bad == string(good) {
				t.Fatalf("%q not in the default manifest", c.from)
			}
			_, err := ParseManifest([]byte(bad))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want it to mention %q", err, c.want)
			}
		})
	}
}

func TestPartIsTheManifestsRule(t *testing.T) {
	m := Default()
	parts := map[string]string{}
	for i := range m.Traces {
		parts[m.Traces[i].Regime] = m.Part(&m.Traces[i])
	}
	want := map[string]string{
		"decode-bound": PartTune, "prefill-bound": PartTune, "queue-dominated": PartTune, "small-model": PartTune,
		"prefix-reuse": PartHeldOut, "large-model": PartHeldOut, "pd-pool": PartHeldOut,
	}
	for regime, part := range want {
		if parts[regime] != part {
			t.Errorf("%s: part %q, want %q", regime, parts[regime], part)
		}
	}
	// The rule, not the trace, decides: holding out another regime moves it.
	m.HeldOutRegimes = []string{"decode-bound"}
	if got := m.Part(&m.Traces[0]); got != PartHeldOut {
		t.Errorf("decode-bound held out by the rule, part %q", got)
	}
	if got := m.Part(&m.Traces[5]); got != PartTune {
		t.Errorf("large-model no longer held out, part %q", got)
	}
}

func TestSelect(t *testing.T) {
	m := Default()
	for _, c := range []struct {
		names, want, heldOut []string
		err                  string
	}{
		{names: []string{"pd-pool"}, want: []string{"pd-pool"}, heldOut: []string{"pd-pool"}},
		{names: []string{"large-model", "decode-bound"}, want: []string{"decode-bound", "large-model"}, heldOut: []string{"large-model"}},
		{names: []string{"small-model"}, want: []string{"small-model"}},
		{names: []string{"pd-pool", "galaxy"}, err: `no trace or regime "galaxy"`},
	} {
		sub, idx, err := m.Select(c.names)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want %q", c.names, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", c.names, err)
		}
		var got []string
		for i, tr := range sub.Traces {
			got = append(got, tr.Name)
			if m.Traces[idx[i]].Name != tr.Name {
				t.Errorf("%v: index %d is %s, not %s", c.names, idx[i], m.Traces[idx[i]].Name, tr.Name)
			}
		}
		if !slices.Equal(got, c.want) || !slices.Equal(sub.HeldOutRegimes, c.heldOut) {
			t.Errorf("%v: traces %v held out %v, want %v and %v", c.names, got, sub.HeldOutRegimes, c.want, c.heldOut)
		}
		if err := sub.Validate(); err != nil {
			t.Errorf("%v: the selection is not a valid manifest: %v", c.names, err)
		}
	}
	if len(m.Traces) != 7 || len(m.HeldOutRegimes) != 3 {
		t.Errorf("Select changed the manifest it selects from: %d traces, %v", len(m.Traces), m.HeldOutRegimes)
	}
}
