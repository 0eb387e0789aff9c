package suite

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
)

const committedManifest = "testdata/manifest.json"

// The committed manifest is the built-in suite with its digests, and
// regenerating it gives the same bytes: the suite is reproducible from the
// manifest alone, which is why its 4 MB of traces are not committed.
func TestCommittedManifestRegeneratesBitForBit(t *testing.T) {
	want, err := os.ReadFile(committedManifest)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := ParseManifest(want)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := Default()
	if err := Generate(context.Background(), m, dir, false); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOARCH != "amd64" {
		// math.Exp and math.Log are assembly on amd64 and may round
		// differently elsewhere; the digests are those of amd64.
		for i := range m.Traces {
			m.Traces[i].SHA256, committed.Traces[i].SHA256 = "", ""
			m.Traces[i].Rows, committed.Traces[i].Rows = 0, 0
		}
		a, _ := m.Encode()
		b, _ := committed.Encode()
		if !bytes.Equal(a, b) {
			t.Fatalf("Default() and %s differ beyond digests", committedManifest)
		}
		return
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Default() regenerates to a manifest other than %s (refresh it with `headroom suite DIR` and copy DIR/manifest.json, if the change is meant):\n%s", committedManifest, got)
	}
	// And regenerating from the committed manifest, with the check, agrees.
	if err := Generate(context.Background(), committed, t.TempDir(), true); err != nil {
		t.Fatal(err)
	}
}

func TestGenerateChecksDigests(t *testing.T) {
	m := tinyManifest()
	dir := t.TempDir()
	if err := Generate(context.Background(), m, dir, true); err != nil {
		t.Fatal(err)
	}
	if m.Traces[0].SHA256 == "" || m.Traces[0].Rows == 0 {
		t.Fatalf("digest and rows not filled: %+v", m.Traces[0])
	}
	// Same manifest, same bytes.
	if err := Generate(context.Background(), m, t.TempDir(), true); err != nil {
		t.Fatalf("regeneration: %v", err)
	}
	// A manifest whose digest does not match what its settings produce is
	// refused with the check, and rewritten without it.
	m.Traces[0].Seed++
	if err := Generate(context.Background(), m, t.TempDir(), true); err == nil || !strings.Contains(err.Error(), "regenerates") {
		t.Fatalf("changed seed passed the check: %v", err)
	}
	old := m.Traces[0].SHA256
	if err := Generate(context.Background(), m, t.TempDir(), false); err != nil || m.Traces[0].SHA256 == old {
		t.Fatalf("refresh: %v, digest %s (was %s)", err, m.Traces[0].SHA256, old)
	}
}

func TestLoadRefusesAChangedTrace(t *testing.T) {
	m := tinyManifest()
	dir := t.TempDir()
	if err := Generate(context.Background(), m, dir, false); err != nil {
		t.Fatal(err)
	}
	loaded, traces, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) != len(loaded.Traces) || len(traces[0]) != loaded.Traces[0].Rows {
		t.Fatalf("loaded %d traces, first %d rows; manifest %+v", len(traces), len(traces[0]), loaded.Traces)
	}
	path := filepath.Join(dir, m.Traces[0].File())
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(path, bytes.Replace(data, []byte(`"num_request_waiting":0`), []byte(`"num_request_waiting":1`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("edited trace loaded: %v", err)
	}
}

// Each regime shows, in the rows the router would record, the property it
// is in the suite for.
func TestRegimesHaveTheirShape(t *testing.T) {
	type stats struct {
		rows                      int
		waitingShare, prefixMean  float64
		promptMedian, tpotMedian  float64
		runningMedian, ttftMedian float64
		tpotSpread                float64 // TPOT p90 / p50
		// Rows per pod_type ("" monolithic) and label.
		ttftPods, tpotPods map[string]int
		// The prompts and TTFT of prefill pods' TTFT rows (split
		// requests) and the prompts of decode pods' (not split).
		minSplitPrompt, maxUnsplitPrompt int64
		minSplitTTFT                     float64
		// Measured KV transfers: on prefill pods' TTFT rows, elsewhere,
		// and the link classes they took.
		splitTransfers, otherTransfers int
		transferClasses                map[features.LinkClass]int
	}
	of := func(s []features.Sample) stats {
		var prompt, tpot, running, ttft []float64
		st := stats{rows: len(s), ttftPods: map[string]int{}, tpotPods: map[string]int{},
			minSplitPrompt: math.MaxInt64, minSplitTTFT: math.Inf(1), transferClasses: map[features.LinkClass]int{}}
		for _, x := range s {
			if tr := x.Transfer; tr != nil {
				if x.ActualTTFTMs > 0 && x.Row.PodType == PodTypePrefill && tr.Ms > 0 && tr.Ms < x.ActualTTFTMs {
					st.splitTransfers++
				} else {
					st.otherTransfers++
				}
				st.transferClasses[tr.Class()]++
			}
			if x.Row.NumRequestWaiting > 0 {
				st.waitingShare++
			}
			st.prefixMean += x.Row.PrefixCacheScore
			prompt = append(prompt, float64(x.Row.InputTokenLength))
			running = append(running, float64(x.Row.NumRequestRunning))
			if x.ActualTPOTMs > 0 {
				tpot = append(tpot, x.ActualTPOTMs)
				st.tpotPods[x.Row.PodType]++
			}
			if x.ActualTTFTMs > 0 {
				ttft = append(ttft, x.ActualTTFTMs)
				st.ttftPods[x.Row.PodType]++
				switch x.Row.PodType {
				case PodTypePrefill:
					st.minSplitPrompt = min(st.minSplitPrompt, x.Row.InputTokenLength)
					st.minSplitTTFT = min(st.minSplitTTFT, x.ActualTTFTMs)
				case PodTypeDecode:
					st.maxUnsplitPrompt = max(st.maxUnsplitPrompt, x.Row.InputTokenLength)
				}
			}
		}
		st.waitingShare /= float64(len(s))
		st.prefixMean /= float64(len(s))
		st.promptMedian, st.tpotMedian = median(prompt), median(tpot)
		st.runningMedian, st.ttftMedian = median(running), median(ttft)
		st.tpotSpread = quantile(tpot, 0.9) / st.tpotMedian
		return st
	}
	m := Default()
	by := map[string]stats{}
	var pd *PD
	for i := range m.Traces {
		if m.Traces[i].Regime == "pd-pool" {
			pd = m.Traces[i].PD
		}
		s, err := m.Traces[i].Samples(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		by[m.Traces[i].Regime] = of(s)
		t.Logf("%-16s %+v", m.Traces[i].Regime, by[m.Traces[i].Regime])
	}
	for _, c := range []struct {
		what string
		ok   bool
	}{
		{"decode-bound runs the largest batches", by["decode-bound"].runningMedian > 2*by["queue-dominated"].runningMedian},
		{"prefill-bound has the longest prompts", by["prefill-bound"].promptMedian > 1500},
		{"prefill-bound's TTFT is several times the chat regimes'", by["prefill-bound"].ttftMedian > 3*by["large-model"].ttftMedian},
		{"queue-dominated: most rows see a queue", by["queue-dominated"].waitingShare > 0.4},
		{"elsewhere queues are rare", by["decode-bound"].waitingShare < 0.15 && by["large-model"].waitingShare < 0.15},
		{"prefix-reuse: most of the prompt is cached", by["prefix-reuse"].prefixMean > 0.7},
		{"no prefix hits in the chat regimes", by["small-model"].prefixMean == 0},
		{"small model decodes faster than large", by["small-model"].tpotMedian < 0.5*by["large-model"].tpotMedian},
		// The P/D pool: rows of both pod types, as llm-d's router records
		// them (the TTFT row of a split request on the prefill pod, every
		// TPOT row on the decode pod), the split decided by llm-d's
		// threshold, and the disaggregation's effects on the labels.
		{"pd-pool: most TTFT rows are prefill pods' (split requests)", pd != nil &&
			by["pd-pool"].ttftPods[PodTypePrefill] > 3*by["pd-pool"].ttftPods[PodTypeDecode]},
		{"pd-pool: some TTFT rows are decode pods' (requests not split)", by["pd-pool"].ttftPods[PodTypeDecode] > 50},
		{"pd-pool: every row has a pod type", by["pd-pool"].ttftPods[""] == 0 && by["pd-pool"].tpotPods[""] == 0},
		{"pd-pool: every TPOT row is a decode pod's", by["pd-pool"].tpotPods[PodTypePrefill] == 0 && by["pd-pool"].tpotPods[PodTypeDecode] > 800},
		{"pd-pool: split exactly at the threshold (no prefix hits in chat)", pd != nil &&
			by["pd-pool"].minSplitPrompt >= int64(pd.SplitThreshold) && by["pd-pool"].maxUnsplitPrompt < int64(pd.SplitThreshold)},
		{"pd-pool: a split request pays two frontends (P, then D) before its first token", pd != nil &&
			by["pd-pool"].minSplitTTFT >= 2*m.Traces[len(m.Traces)-1].Fleet.Cost.FrontendMs},
		{"pd-pool: decode pods run no prefills of split requests, so TPOT barely moves", by["pd-pool"].tpotSpread < 1.05},
		// A split request's TTFT row carries its measured transfer, shorter
		// than the TTFT it is part of; only prefill failures (1%) lack one.
		{"pd-pool: split requests' TTFT rows carry their transfers", by["pd-pool"].splitTransfers >= by["pd-pool"].ttftPods[PodTypePrefill]*95/100},
		{"pd-pool: no transfer on any other row", by["pd-pool"].otherTransfers == 0},
		{"pd-pool: transfers cross racks and zones", len(by["pd-pool"].transferClasses) >= 3},
	} {
		if !c.ok {
			t.Errorf("%s: not so", c.what)
		}
	}
	for regime, st := range by {
		if regime == "pd-pool" {
			continue
		}
		if len(st.ttftPods) != 1 || len(st.tpotPods) != 1 || st.ttftPods[""] == 0 || len(st.transferClasses) > 0 {
			t.Errorf("%s: pod types %v (TTFT) and %v (TPOT), transfers %v; a monolithic regime has none", regime, st.ttftPods, st.tpotPods, st.transferClasses)
		}
		if st.tpotSpread <= by["pd-pool"].tpotSpread {
			t.Errorf("%s: TPOT p90/p50 %.3f, at or below the P/D pool's %.3f", regime, st.tpotSpread, by["pd-pool"].tpotSpread)
		}
	}
	for regime, st := range by {
		if st.rows < 1500 || st.rows > 2000 {
			t.Errorf("%s: %d rows; the suite is sized for 1,500-2,000 per trace", regime, st.rows)
		}
	}
}

func median(v []float64) float64 { return quantile(v, 0.5) }

// quantile is the value below which a share q of v lies (nearest rank).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[int(q*float64(len(s)))]
}

// tinyManifest is two small traces of the default suite's regimes, a tuning
// and a held-out one, for tests that replay them.
func tinyManifest() *Manifest {
	m := Default()
	m.Eval = Eval{Seeds: 1, Every: 100}
	small, large := m.Traces[4], m.Traces[5]
	small.Workload.Requests, large.Workload.Requests = 150, 150
	m.Traces = []Trace{small, large}
	m.HeldOutRegimes = []string{large.Regime}
	return m
}
