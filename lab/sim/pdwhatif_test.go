package sim

import (
	"bytes"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
)

func TestPlacePods(t *testing.T) {
	classes := func(layout string) map[features.LinkClass]int {
		p, d, err := PlacePods(layout, 4, 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(p) != 4 || len(d) != 4 {
			t.Fatalf("%s: %d prefill and %d decode pods", layout, len(p), len(d))
		}
		n := map[features.LinkClass]int{}
		for _, a := range p {
			for _, b := range d {
				n[features.ClassOf(a, b)]++
			}
		}
		return n
	}
	for _, tc := range []struct {
		layout string
		want   map[features.LinkClass]int
	}{
		{"one-node", map[features.LinkClass]int{features.SameNode: 16}},
		{"one-rack", map[features.LinkClass]int{features.SameRack: 16}},
		{"racks", map[features.LinkClass]int{features.SameZone: 12, features.SameRack: 4}},
		{"zones", map[features.LinkClass]int{features.CrossZone: 8, features.SameZone: 4, features.SameRack: 4}},
		{"equal-links", map[features.LinkClass]int{features.CrossZone: 8, features.SameZone: 4, features.SameRack: 4}},
	} {
		got := classes(tc.layout)
		if len(got) != len(tc.want) {
			t.Errorf("%s: pairs by class %v, want %v", tc.layout, got, tc.want)
		}
		for c, n := range tc.want {
			if got[c] != n {
				t.Errorf("%s: pairs by class %v, want %v", tc.layout, got, tc.want)
			}
		}
	}
	if _, _, err := PlacePods("galaxy", 1, 1); err == nil {
		t.Error("unknown layout accepted")
	}
	if _, _, err := PlacePods("racks", 1, 0); err == nil {
		t.Error("no decode pods accepted")
	}
}

func TestComparePDTable(t *testing.T) {
	p, d, err := PlacePods("racks", 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	engine := testConfig()
	cfg := PDConfig{Prefill: engine, Decode: engine, PrefillPods: p, DecodePods: d, Links: DefaultLinks(),
		KVBytesPerToken: DefaultKVBytesPerToken}
	var reqs []*Request
	for i := range 20 {
		reqs = append(reqs, promptReq(i+1, 0, 300+10*i, 5, uint64(i%3)))
	}
	results, err := ComparePD(t.Context(), reqs, cfg, PDRouterNames)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WritePDTable(&buf, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"greedy", "topology-constant", "decode-only", "KV transfer p95 (ms)", "100.0%"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
	if _, err := ComparePD(t.Context(), reqs, cfg, []string{"joint"}); err == nil {
		t.Error("unknown router accepted")
	}
}
