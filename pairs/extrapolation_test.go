package pairs

import (
	"slices"
	"testing"

	"github.com/headroomhq/headroom/model"
)

// An option is extrapolated when the row its TTFT rests on lies above the
// TTFT model's training maximum on a column latency grows with: the
// prefill pod's row for a pair, the decode pod's for no split. Below a
// minimum, or beyond the range of a column latency falls with (the cached
// share), the model errs high, which is not flagged.
func TestRankMarksExtrapolatedOptions(t *testing.T) {
	m := testModels(t, links())
	for i := range m.TTFT.Ranges {
		m.TTFT.Ranges[i] = model.Range{Min: 0, Max: 1e9}
	}
	set := func(col string, r model.Range) {
		i := m.TTFT.Schema().Index(col)
		if i < 0 {
			t.Fatalf("no column %s", col)
		}
		m.TTFT.Ranges[i] = r
	}
	set("num_request_waiting", model.Range{Min: 0, Max: 5})
	set("prefix_cache_score", model.Range{Min: 0.2, Max: 0.5})
	set("kv_cache_percentage", model.Range{Min: 0.3, Max: 0.9})

	quiet := func(name string) Candidate {
		c := pod(name, rackA1, 1, 2, 0.3)
		c.Row.KVCachePercentage = 0.5
		return c
	}
	loaded := quiet("p-loaded")
	loaded.Row.NumRequestWaiting = 9 // above the 5 trained on
	cached := quiet("p-cached")
	cached.Row.PrefixCacheScore = 0.9 // above the range, but caching only lowers latency
	cool := quiet("p-cool")
	cool.Row.KVCachePercentage = 0.1 // below the range
	busyD := quiet("d-busy")
	busyD.Topology = rackA2
	busyD.Row.NumRequestWaiting = 7
	calmD := quiet("d-calm")
	calmD.Topology = rackB

	req := &Request{InputTokenLength: 2000, Prefill: []Candidate{loaded, cached, cool}, Decode: []Candidate{busyD, calmD}}
	var res Result
	if err := Rank(&m, req, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Pairs) != 6 || len(res.NoSplit) != 2 {
		t.Fatalf("%d pairs and %d no-split options", len(res.Pairs), len(res.NoSplit))
	}
	for _, o := range append(slices.Clone(res.Pairs), res.NoSplit...) {
		n := names(req, o)
		want := n[0] == "p-loaded" || n == [2]string{"", "d-busy"}
		if o.Extrapolated != want {
			t.Errorf("%v: extrapolated %v, want %v", n, o.Extrapolated, want)
		}
	}
	// In range everywhere, nothing is flagged.
	for i := range m.TTFT.Ranges {
		m.TTFT.Ranges[i] = model.Range{Min: 0, Max: 1e9}
	}
	if err := Rank(&m, req, &res); err != nil {
		t.Fatal(err)
	}
	for _, o := range append(slices.Clone(res.Pairs), res.NoSplit...) {
		if o.Extrapolated {
			t.Errorf("%v: extrapolated within the training ranges", names(req, o))
		}
	}
}
