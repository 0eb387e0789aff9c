package suite

import (
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
		{"held-out regime without trace", `"large-model"
  ]`, `"large-modle"
  ]`, "has no trace"},
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
		"prefix-reuse": PartHeldOut, "large-model": PartHeldOut,
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
