package dashboard

import (
	"bytes"
	"context"
	"encoding/xml"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
	"github.com/headroomhq/headroom/trainer/fit"
	"github.com/headroomhq/headroom/xgboost"
)

// samples makes n samples with both labels, latency growing with prompt
// length, load and KV-cache use, spread over the store's KV × prefix grid.
func samples(rng *rand.Rand, n int, start time.Time) []features.Sample {
	out := make([]features.Sample, n)
	for i := range out {
		row := features.Row{
			KVCachePercentage: rng.Float64() * 0.8, PrefixCacheScore: rng.Float64(),
			InputTokenLength: int64(rng.IntN(3000) + 20), NumRequestRunning: int64(rng.IntN(40)),
			NumRequestWaiting: int64(rng.IntN(4)), NumTokensGenerated: int64(rng.IntN(200)),
		}
		noise := 1 + 0.08*rng.NormFloat64()
		ttft := (25 + 0.08*float64(row.InputTokenLength)*(1-0.6*row.PrefixCacheScore) + 3*float64(row.NumRequestRunning)) * noise
		tpot := (6 + 0.25*float64(row.NumRequestRunning) + 10*row.KVCachePercentage) * noise
		out[i] = features.Sample{Row: row, ActualTTFTMs: ttft, ActualTPOTMs: tpot, Timestamp: start.Add(time.Duration(i) * time.Millisecond)}
	}
	return out
}

type fixture struct {
	db  *store.DB
	tr  *trainer.Trainer
	now time.Time
}

// newFixture runs a trainer over a store through a few retrains, with the
// xgboost CLI when it is installed (trees, and so a gain plot) and linear
// models otherwise.
func newFixture(t testing.TB, retrains int) *fixture {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "samples.db"), store.Options{NoSync: true, HoldoutSpread: 1}.ForReplay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	opts := fit.DefaultOptions()
	if _, err := exec.LookPath("xgboost"); err == nil {
		opts.XGBoost = &xgboost.CLI{}
		opts.Params.Rounds = 30
	}
	tr, err := trainer.New(trainer.Config{Fit: opts, BundleDir: filepath.Join(dir, "bundles")}, db)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	start := time.Unix(1_800_000_000, 0).UTC()
	for i := range retrains {
		batch := samples(rng, 600, start.Add(time.Duration(i)*time.Minute))
		if _, err := db.Add(batch); err != nil {
			t.Fatal(err)
		}
		tr.ObserveServed(batch) // as the api does after each ingest: live error

		if _, err := tr.Retrain(context.Background()); err != nil && tr.Current() == nil {
			t.Fatal(err)
		}
	}
	return &fixture{db: db, tr: tr, now: time.Now()}
}

// TestTrainerSnapshotIsTheModelInService: the holdout points are the
// store's held-out samples as the model in service predicts them (their
// MAPE is the bundle's own holdout MAPE), and the fill grid holds every
// stored training sample in its KV × prefix cell.
func TestTrainerSnapshotIsTheModelInService(t *testing.T) {
	f := newFixture(t, 2)
	s, err := FromTrainer(context.Background(), f.tr, f.db, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if s.Bundle == nil || len(s.Targets) != len(features.Targets) || len(s.Retrains) != 4 {
		t.Fatalf("bundle %v, %d targets, %d runs; want a bundle, every target, 2 runs of each per-pod one", s.Bundle != nil, len(s.Targets), len(s.Retrains))
	}
	counts := f.db.Counts()
	for _, tv := range s.Targets {
		if !tv.Target.PerPod() {
			continue // no transfers among the fixture's samples
		}
		m := tv.Model
		if m == nil {
			t.Fatalf("%s: no model", tv.Target)
		}
		if len(tv.Holdout) != counts.Holdout(tv.Target) || len(tv.Holdout) != m.Holdout.Rows {
			t.Errorf("%s: %d holdout points, store holds %d, model measured %d", tv.Target, len(tv.Holdout), counts.Holdout(tv.Target), m.Holdout.Rows)
		}
		pred, actual := make([]float64, len(tv.Holdout)), make([]float64, len(tv.Holdout))
		for i, p := range tv.Holdout {
			pred[i], actual[i] = p.Predicted, p.Actual
		}
		if got := model.Measure(pred, actual).MAPE; math.Abs(got-m.Holdout.MAPE) > 1e-6*m.Holdout.MAPE {
			t.Errorf("%s: MAPE of the plotted points %v, the model's holdout MAPE %v", tv.Target, got, m.Holdout.MAPE)
		}
		if tv.Fill == nil {
			t.Fatalf("%s: no fill grid for the default scheme", tv.Target)
		}
		total := 0
		for _, row := range tv.Fill.Counts {
			for _, n := range row {
				total += n
			}
		}
		if len(tv.Fill.Counts) != 10 || len(tv.Fill.Counts[0]) != 4 || total != counts.Train(tv.Target) {
			t.Errorf("%s: fill %dx%d holding %d, want 10x4 holding the store's %d", tv.Target,
				len(tv.Fill.Counts), len(tv.Fill.Counts[0]), total, counts.Train(tv.Target))
		}
		// Samples with KV-cache use under 80% never reach the top two rows.
		if n := tv.Fill.Counts[8][0] + tv.Fill.Counts[9][3]; n != 0 {
			t.Errorf("%s: %d samples in cells no sample falls in", tv.Target, n)
		}
	}
}

var svgElement = regexp.MustCompile(`(?s)<svg.*?</svg>`)

// TestPageIsSelfContained: the page is well-formed, loads nothing from
// anywhere, runs no script, and has every plot it promises.
func TestPageIsSelfContained(t *testing.T) {
	f := newFixture(t, 3)
	s, err := FromTrainer(context.Background(), f.tr, f.db, f.now)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Render(&b, s); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if out := os.Getenv("HEADROOM_DASHBOARD_OUT"); out != "" {
		if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The SVG namespaces are names, not addresses anything is loaded from.
	bare := strings.NewReplacer(`xmlns="http://www.w3.org/2000/svg"`, "", `xmlns:xlink="http://www.w3.org/1999/xlink"`, "").Replace(page)
	for _, forbidden := range []string{"<script", "src=", "<link", "@import", "url(", "http://", "https://", "Could not draw"} {
		if strings.Contains(bare, forbidden) {
			t.Errorf("page contains %q", forbidden)
		}
	}
	svgs := svgElement.FindAllString(page, -1)
	withTrees := s.Targets[0].Model.Trees != nil
	want := 2*3 + 2 // per target: holdout, fill, coefficients; then MAPE and durations
	if withTrees {
		want += 2 // gain per target
	}
	if len(svgs) != want {
		t.Errorf("%d plots, want %d (trees: %v)", len(svgs), want, withTrees)
	}
	for i, s := range svgs {
		d := xml.NewDecoder(strings.NewReader(s))
		for {
			_, err := d.Token()
			if err != nil {
				if err.Error() != "EOF" {
					t.Errorf("plot %d is not well-formed XML: %v", i, err)
				}
				break
			}
		}
	}
	for _, want := range []string{
		"TTFT on the holdout: predicted vs measured (", "TPOT store: ", "Error over time: holdout and live MAPE",
		"Training runs: wall time per target", "linear model: coefficient per feature", "Recent training runs",
		"input_token_length", // a feature name on the coefficient plot
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, tv := range s.Targets {
		if !tv.Target.PerPod() {
			continue // no transfers among the fixture's samples
		}
		n := strings.Count(page, "<td>"+tv.Target.Title()+"</td>")
		if n != 3 {
			t.Errorf("recent runs list %d %s runs, want 3", n, tv.Target)
		}
	}
}

// TestPageBeforeTheFirstModel: an empty trainer and a predictor without a
// bundle still get a page that says why it is empty.
func TestPageBeforeTheFirstModel(t *testing.T) {
	f := newFixture(t, 0)
	s, err := FromTrainer(context.Background(), f.tr, f.db, f.now)
	if err != nil {
		t.Fatal(err)
	}
	p, err := predictor.New(predictor.Mean, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Snapshot{s, FromPredictor(p, "http://trainer:8000", f.now)} {
		var b bytes.Buffer
		if err := Render(&b, s); err != nil {
			t.Fatal(err)
		}
		// The trainer's page still shows its (empty) store.
		wantPlots := map[string]int{"trainer": 2, "predictor": 0}[s.Role]
		if !strings.Contains(b.String(), "No model yet") || strings.Count(b.String(), "<svg") != wantPlots {
			t.Errorf("%s page before the first model, want %d plots:\n%s", s.Role, wantPlots, b.String())
		}
	}
}

// TestPredictorPage shows the bundle in service and where it came from,
// without the trainer's store and history.
func TestPredictorPage(t *testing.T) {
	f := newFixture(t, 1)
	p, err := predictor.New(predictor.Mean, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	loaded := f.now.Add(-90 * time.Second)
	p.Swap(f.tr.Current(), loaded)
	s := FromPredictor(p, "http://trainer:8000", f.now)
	var b bytes.Buffer
	if err := Render(&b, s); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{"Headroom predictor", "bundle <b>v1</b>", "loaded 1m 30s ago", "http://trainer:8000", "coefficient per feature"} {
		if !strings.Contains(page, want) {
			t.Errorf("predictor page lacks %q", want)
		}
	}
	for _, absent := range []string{"training samples (at most", "on the holdout", "Recent training runs"} {
		if strings.Contains(page, absent) {
			t.Errorf("predictor page shows %q, which only the trainer has", absent)
		}
	}
}

func TestAge(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		ago  time.Duration
		want string
	}{{-time.Second, "just now"}, {5 * time.Second, "5s ago"}, {125 * time.Second, "2m 5s ago"}, {3*time.Hour + 4*time.Minute, "3h 4m ago"}, {72 * time.Hour, "3 days ago"}} {
		if got := age(now, now.Add(-c.ago)); got != c.want {
			t.Errorf("age %v: %q, want %q", c.ago, got, c.want)
		}
	}
}

func TestLogTicksLabelEveryRange(t *testing.T) {
	for _, r := range [][2]float64{{30, 300}, {5, 5000}, {12, 30}, {18, 22}, {0.5, 2}} {
		var labels []string
		for _, tk := range (logTicks{}).Ticks(r[0], r[1]) {
			if tk.Value < r[0] || tk.Value > r[1] {
				t.Errorf("range %v: tick %v outside", r, tk.Value)
			}
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		if len(labels) < 3 {
			t.Errorf("range %v: labels %v, want at least 3", r, labels)
		}
	}
}

// BenchmarkTrainerPage is the cost of one page view of a trainer with a
// full holdout (1,000 samples per target): the holdout read and
// predicted, and every plot drawn.
func BenchmarkTrainerPage(b *testing.B) {
	f := newFixture(b, 17)
	var page bytes.Buffer
	for b.Loop() {
		s, err := FromTrainer(context.Background(), f.tr, f.db, f.now)
		if err != nil {
			b.Fatal(err)
		}
		page.Reset()
		if err := Render(&page, s); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(page.Len()), "page-bytes")
}

// TestPageShowsGateRefusals: a candidate the publication gate refused is
// on the page with its reason, and whether the model in service stayed.
func TestPageShowsGateRefusals(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	s := Snapshot{Role: "trainer", Now: at, Targets: []Target{{Target: features.TTFT, Status: &trainer.TargetStatus{
		GateRejections: 3,
		Rejected:       &trainer.GateVerdict{At: at, Reason: "worse_than_served", Detail: "holdout MAPE 31% against 12%"},
	}}}}
	var b bytes.Buffer
	if err := Render(&b, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"The publication gate refused a candidate at 2026-12-01 10:00:00 UTC: worse_than_served (holdout MAPE 31% against 12%); the model in service stayed.",
		"Candidates refused by the publication gate so far: 3.",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// transferSamples makes n disaggregated samples: a TTFT and a measured KV
// transfer, same-rack at 40 GB/s or cross-zone at 3 GB/s.
func transferSamples(rng *rand.Rand, n int, start time.Time) []features.Sample {
	out := samples(rng, n, start)
	for i := range out {
		tokens := int64(64 + rng.IntN(4000))
		zone, bw := "a", 40e9
		if i%2 == 1 {
			zone, bw = "b", 3e9
		}
		ms := 0.05 + 1000*float64(tokens)*131072/bw*(1+0.05*rng.NormFloat64())
		out[i].ActualTTFTMs += ms
		out[i].Transfer = &features.Transfer{Ms: ms, Tokens: tokens, BytesPerToken: 131072, Concurrent: 1,
			PrefillPod: "p-0", DecodePod: "d-0",
			Prefill: features.Topology{Node: "n0", Rack: "r0", Zone: "a", Region: "eu"},
			Decode:  features.Topology{Node: "n1", Rack: "r0", Zone: zone, Region: "eu"}}
		if zone == "b" {
			out[i].Transfer.Decode.Rack = "r9"
		}
	}
	return out
}

// Every target has its part of the page, the KV transfer's as the
// per-pod ones': its law per link class, its holdout predicted against
// measured, its runs in the history and on the plots over time.
func TestPageShowsEveryTarget(t *testing.T) {
	f := newFixture(t, 0)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 2 {
		batch := transferSamples(rng, 400, time.Unix(1_800_000_000, 0).Add(time.Duration(i)*time.Minute))
		if _, err := f.db.Add(batch); err != nil {
			t.Fatal(err)
		}
		f.tr.ObserveServed(batch)
		if _, err := f.tr.Retrain(context.Background()); err != nil && f.tr.Current() == nil {
			t.Fatal(err)
		}
	}
	s, err := FromTrainer(context.Background(), f.tr, f.db, f.now)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Targets) != len(features.Targets) {
		t.Fatalf("%d target views, want one per target", len(s.Targets))
	}
	for i, tv := range s.Targets {
		if tv.Target != features.Targets[i] || tv.Status == nil {
			t.Errorf("view %d: %s with status %v, want %s's", i, tv.Target, tv.Status, features.Targets[i])
		}
	}
	kv := s.Targets[features.KVTransfer]
	if kv.Transfer == nil || kv.Transfer != s.Bundle.Transfer || len(kv.Holdout) == 0 || kv.Fill != nil {
		t.Fatalf("kv_transfer view: model %v, %d holdout points, fill %v", kv.Transfer != nil, len(kv.Holdout), kv.Fill)
	}
	pred, actual := make([]float64, len(kv.Holdout)), make([]float64, len(kv.Holdout))
	for i, p := range kv.Holdout {
		pred[i], actual[i] = p.Predicted, p.Actual
	}
	if got := model.Measure(pred, actual); got.Rows != kv.Transfer.Holdout.Rows || math.Abs(got.MAPE-kv.Transfer.Holdout.MAPE) > 1e-6*kv.Transfer.Holdout.MAPE {
		t.Errorf("kv_transfer: plotted points %+v, the model's holdout %+v", got, kv.Transfer.Holdout)
	}
	var b bytes.Buffer
	if err := Render(&b, s); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		"KV-transfer — bandwidth law per link class", "<td>same-rack</td>", "<td>cross-zone</td>",
		"KV-transfer on the holdout: predicted vs measured (", "<td>KV-transfer</td>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// The split-TTFT law's per-token term holds the prefill as well as the
	// link, so its card gives time per thousand tokens and no bandwidth;
	// the KV transfer's gives both.
	if s.Bundle.Law(features.SplitTTFT) == nil {
		t.Fatal("no split-TTFT law: the fixture's split samples should train one")
	}
	kvCard, splitCard, ok := strings.Cut(page[strings.Index(page, "KV-transfer — "):], "split TTFT — ")
	if !ok {
		t.Fatal("page has no split-TTFT card after the KV-transfer card")
	}
	splitCard, _, _ = strings.Cut(splitCard, "</section>")
	kvCard, _, _ = strings.Cut(kvCard, "</section>")
	for _, c := range []struct {
		name, card string
		gbps       bool
	}{{"KV-transfer", kvCard, true}, {"split TTFT", splitCard, false}} {
		if got := strings.Contains(c.card, " GB/s<"); got != c.gbps {
			t.Errorf("%s card shows a bandwidth: %v, want %v", c.name, got, c.gbps)
		}
		if !strings.Contains(c.card, "<th>per 1k tokens alone</th>") {
			t.Errorf("%s card has no time per thousand tokens", c.name)
		}
	}
	for _, tg := range features.Targets {
		if legend := tg.Title() + " holdout"; !strings.Contains(page, legend) {
			t.Errorf("the MAPE plot has no series %q", legend)
		}
	}
}
