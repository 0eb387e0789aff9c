package suite

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/lab/trace"
)

// pdTrace is the default suite's P/D trace, shortened, with a prefill
// failure rate high enough that a few hundred requests include failures.
func pdTrace(t *testing.T) Trace {
	t.Helper()
	for _, tr := range Default().Traces {
		if tr.PD != nil {
			tr.Workload.Requests = 300
			pd := *tr.PD
			pd.PrefillFailureRate = 0.1
			tr.PD = &pd
			return tr
		}
	}
	t.Fatal("the default suite has no P/D trace")
	return Trace{}
}

// Every request of a P/D run gives the rows llm-d's router records for it,
// on the pod and with the label the PD doc comment promises: split requests'
// TTFT on the prefill pod's dispatch-time features, unsplit requests' on the
// decode pod's, every TPOT on the decode pod's; failed splits recorded as
// splits; rows in time order; and the rows survive the wire format.
func TestPDRowsAreWhatTheRouterRecords(t *testing.T) {
	tr := pdTrace(t)
	rows, err := tr.Samples(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The same run again, to read its outcomes (a run is a pure function
	// of its inputs).
	reqs, err := tr.requests()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := tr.pdConfig()
	if err != nil {
		t.Fatal(err)
	}
	router, err := tr.pdRouter()
	if err != nil {
		t.Fatal(err)
	}
	f, err := sim.SimulatePD(context.Background(), cfg, router, sim.PDHooks{}, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		at    time.Time
		label bool // TPOT
	}
	// Several first tokens can come out of one engine step: rows are
	// matched by time and label kind, then by content.
	byKey := map[key][]features.Sample{}
	take := func(k key, row features.Row, label float64, tr *features.Transfer) bool {
		for i, r := range byKey[k] {
			sameTransfer := (r.Transfer == nil && tr == nil) || (r.Transfer != nil && tr != nil && *r.Transfer == *tr)
			if r.Row == row && (r.ActualTTFTMs == label || r.ActualTPOTMs == label) && sameTransfer {
				byKey[k] = append(byKey[k][:i], byKey[k][i+1:]...)
				return true
			}
		}
		return false
	}
	for i, r := range rows {
		if i > 0 && r.Timestamp.Before(rows[i-1].Timestamp) {
			t.Fatalf("row %d at %v, before row %d at %v", i, r.Timestamp, i-1, rows[i-1].Timestamp)
		}
		if (r.ActualTTFTMs > 0) == (r.ActualTPOTMs > 0) {
			t.Fatalf("row %d has labels TTFT %v and TPOT %v; the router sends one per entry", i, r.ActualTTFTMs, r.ActualTPOTMs)
		}
		k := key{r.Timestamp, r.ActualTPOTMs > 0}
		byKey[k] = append(byKey[k], r)
	}
	var split, unsplit, failed, want int
	for _, o := range f.Outcomes() {
		d := o.Decode
		if !d.Done {
			continue
		}
		wantTTFT := d.Row
		wantTTFT.PodType = PodTypeDecode
		var wantTransfer *features.Transfer
		switch {
		case o.Split:
			wantTTFT = o.Prefill.Row
			wantTTFT.PodType = PodTypePrefill
			split++
			if o.PrefillFailed {
				failed++
				break
			}
			wantTransfer = &features.Transfer{
				Ms: float64(o.KVTransferTime()) / 1e6, Tokens: int64(o.KVTransferTokens), BytesPerToken: cfg.KVBytesPerToken,
				PrefillPod: fmt.Sprintf("prefill-%d", o.PrefillPod), DecodePod: fmt.Sprintf("decode-%d", o.DecodePod),
				Prefill: cfg.PrefillPods[o.PrefillPod], Decode: cfg.DecodePods[o.DecodePod],
				Concurrent: int64(o.Transfer.Concurrent),
			}
			if !(wantTransfer.Ms > 0) || wantTransfer.Tokens != int64(o.Request.PromptTokens) {
				t.Fatalf("request %d: transfer of %v ms and %d tokens (prompt %d); chat prompts have no cache hits to skip",
					o.Request.ID, wantTransfer.Ms, wantTransfer.Tokens, o.Request.PromptTokens)
			}
		default:
			unsplit++
		}
		want++
		ttft := math.Trunc(float64(d.TTFT()) / 1e6)
		if !take(key{trace.Epoch().Add(d.FirstToken), false}, wantTTFT, ttft, wantTransfer) {
			t.Errorf("request %d (split %v, failed %v): no TTFT row %+v labelled %v with transfer %+v at its first token",
				o.Request.ID, o.Split, o.PrefillFailed, wantTTFT, ttft, wantTransfer)
		}
		if o.Request.OutputTokens > 1 {
			want++
			wantTPOT := d.Row
			wantTPOT.PodType = PodTypeDecode
			if tpot := float64(d.TPOT()) / 1e6; !take(key{trace.Epoch().Add(d.Finish), true}, wantTPOT, tpot, nil) {
				t.Errorf("request %d: no TPOT row %+v labelled %v at its end", o.Request.ID, wantTPOT, tpot)
			}
		}
	}
	if len(rows) != want {
		t.Errorf("%d rows, want %d", len(rows), want)
	}
	if split == 0 || unsplit == 0 || failed == 0 {
		t.Errorf("the run covers %d splits (%d failed) and %d unsplit requests; the test needs each", split, failed, unsplit)
	}

	back, err := trace.Read(bytes.NewReader(Encode(rows)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if back[i].Row != rows[i].Row {
			t.Fatalf("row %d: %+v after the wire, %+v before", i, back[i].Row, rows[i].Row)
		}
		if (back[i].Transfer == nil) != (rows[i].Transfer == nil) || (back[i].Transfer != nil && *back[i].Transfer != *rows[i].Transfer) {
			t.Fatalf("row %d: transfer %+v after the wire, %+v before", i, back[i].Transfer, rows[i].Transfer)
		}
		// The TTFT a model learns from a split request's row is the
		// client's less the transfer, which the transfer model learns.
		if tr := rows[i].Transfer; tr != nil {
			got, ok := back[i].Label(features.TTFT)
			if want := rows[i].ActualTTFTMs - tr.Ms; !ok || got != want {
				t.Fatalf("row %d: TTFT label %v (%v), want %v less the %v ms transfer = %v", i, got, ok, rows[i].ActualTTFTMs, tr.Ms, want)
			}
			if ms, ok := back[i].Label(features.KVTransfer); !ok || ms != tr.Ms {
				t.Fatalf("row %d: transfer label %v (%v), want %v", i, ms, ok, tr.Ms)
			}
		}
	}
}

func TestManifestLinksAreSimsLinks(t *testing.T) {
	p := PD{Links: ManifestLinks(sim.DefaultLinks())}
	got, err := p.simLinks()
	if err != nil {
		t.Fatal(err)
	}
	if got != sim.DefaultLinks() {
		t.Errorf("links %+v after the manifest, want %+v", got, sim.DefaultLinks())
	}
	p.Links = p.Links[:3]
	if _, err := p.simLinks(); err == nil || !strings.Contains(err.Error(), "one per link class") {
		t.Errorf("three links accepted: %v", err)
	}
}

// The split threshold reaches the router, and a router that never splits
// refuses one.
func TestPDRouterTakesTheThreshold(t *testing.T) {
	tr := pdTrace(t)
	for _, c := range []struct {
		router    string
		threshold int
		want      string // error, or "" for none
	}{
		{"greedy", 300, ""},
		{"topology-constant", 300, ""},
		{"decode-only", 0, ""},
		{"decode-only", 300, "never splits"},
		{"least-queue", 0, "p/d router"},
	} {
		tr.Router, tr.PD.SplitThreshold = c.router, c.threshold
		r, err := tr.pdRouter()
		if c.want != "" {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s, threshold %d: error %v, want %q", c.router, c.threshold, err, c.want)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.router, err)
		}
		var got int
		switch r := r.(type) {
		case *sim.Greedy:
			got = r.SplitThreshold
		case *sim.TopologyConstant:
			got = r.SplitThreshold
		}
		if got != c.threshold {
			t.Errorf("%s: threshold %d, want %d", c.router, got, c.threshold)
		}
	}
}

// The default P/D trace's KV transfers, as its rows carry them, take
// longer the farther apart the pods are; -v prints the figures
// docs/ACCURACY.md quotes, and what subtracting them does to the TTFT label.
func TestPDTransfersFollowTheLinks(t *testing.T) {
	var tr Trace
	for _, x := range Default().Traces {
		if x.PD != nil {
			tr = x
		}
	}
	rows, err := tr.Samples(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	links, err := tr.PD.simLinks()
	if err != nil {
		t.Fatal(err)
	}
	by := map[features.LinkClass][]float64{}
	var all, ttft, perPod []float64
	// The simulator's own law given what a row says: its link's latency,
	// then the bytes at the bandwidth shared by the transfers there when
	// it started. Its error is what a perfect transfer model of the
	// reported fields would still make (the share changes as others join
	// and leave).
	var lawAPE float64
	for i := range rows {
		x := &rows[i]
		if x.Row.PodType != PodTypePrefill || x.ActualTTFTMs == 0 {
			continue
		}
		ttft = append(ttft, x.ActualTTFTMs)
		if y, ok := x.Label(features.TTFT); ok {
			perPod = append(perPod, y)
		}
		if tr := x.Transfer; tr != nil {
			by[tr.Class()] = append(by[tr.Class()], tr.Ms)
			all = append(all, tr.Ms)
			l := links[tr.Class()]
			law := float64(l.Latency)/1e6 + 1000*float64(tr.Tokens)*tr.BytesPerToken/l.BytesPerSec*float64(tr.Concurrent)
			lawAPE += math.Abs(law-tr.Ms) / tr.Ms
		}
	}
	lawMAPE := 100 * lawAPE / float64(len(all))
	t.Logf("the links' own law at the reported concurrency: MAPE %.2f%%", lawMAPE)
	if !(lawMAPE > 0 && lawMAPE < 20) {
		t.Errorf("the links' own law errs by %.2f%% on the rows; rows and links disagree", lawMAPE)
	}
	t.Logf("%d split requests' TTFT rows, %d with a transfer: transfer p50 %.1f ms, p95 %.1f ms; client TTFT p50 %.1f ms, less the transfer %.1f ms",
		len(ttft), len(all), median(all), quantile(all, 0.95), median(ttft), median(perPod))
	prev := 0.0
	for c := features.SameNode; c < features.NumLinkClasses; c++ {
		if len(by[c]) == 0 {
			continue
		}
		m := median(by[c])
		t.Logf("%-12s %4d transfers, median %.1f ms", c, len(by[c]), m)
		if m <= prev {
			t.Errorf("%s: median transfer %.1f ms, not above the nearer class's %.1f ms", c, m, prev)
		}
		prev = m
	}
	if len(by) < 3 {
		t.Errorf("transfers over %d link classes; the zones layout should give same-rack, same-zone and cross-zone", len(by))
	}
}
