package eval

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/lab/sim/workload"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
	"github.com/headroomhq/headroom/trainer/fit"
)

// The KV-transfer target is measured apart from the per-pod ones: its
// samples come from disaggregated runs (a sidecar's reports, or the
// simulator's P/D fleet), and its model is fitted by fit.TransferLaw,
// the service's own fit, on two kinds of split: random 90/10 (how good it
// is) and by transfer size (whether it learned a bandwidth, which is what
// lets a router ask about prompt lengths a link has not carried yet).

// TransferOptions configure EvaluateTransfer.
type TransferOptions struct {
	// Seeds is the number of random 90/10 splits (default 5).
	Seeds int
	// TrainMax and TestMin split by kv_transfer_tokens for extrapolation:
	// train on at most TrainMax tokens, test on more than TestMin (defaults
	// 1,024 and 2,048).
	TrainMax, TestMin int64
	// Quantile is the quantile whose holdout coverage is reported (default
	// 0.9).
	Quantile float64
	// BytesPerToken is the pool's setting, as --kv-bytes-per-token (0:
	// learned from the samples).
	BytesPerToken float64
}

func (o *TransferOptions) setDefaults() {
	if o.Seeds <= 0 {
		o.Seeds = 5
	}
	if o.TrainMax <= 0 {
		o.TrainMax = 1024
	}
	if o.TestMin <= 0 {
		o.TestMin = 2048
	}
	if !(o.Quantile > 0 && o.Quantile < 1) {
		o.Quantile = model.DefaultQuantile
	}
}

// TransferClassResult is one link class's figures.
type TransferClassResult struct {
	Class     string  `json:"class"`
	TrainRows int     `json:"train_rows"`
	TestRows  int     `json:"test_rows"`
	MAPE      float64 `json:"mape"`
	MedianAPE float64 `json:"median_ape"`
	// Bias is the median signed percentage error; negative = too low.
	Bias float64 `json:"median_bias"`
	// BytesPerSec is the bandwidth alone on the link the model learned
	// (of the first seed, for random splits).
	BytesPerSec float64 `json:"bytes_per_sec"`
}

// TransferReport is EvaluateTransfer's answer.
type TransferReport struct {
	Samples int            `json:"samples"`
	Classes map[string]int `json:"samples_per_class"`
	Seeds   int            `json:"seeds"`
	// Holdout is over every class, means over the seeds' random splits;
	// HoldoutByClass per class.
	Holdout        TransferClassResult   `json:"holdout"`
	Coverage       float64               `json:"holdout_coverage_percent"`
	Quantile       float64               `json:"quantile"`
	HoldoutByClass []TransferClassResult `json:"holdout_by_class"`
	// Extrapolation trains on transfers of at most TrainMax tokens and
	// tests on those of more than TestMin, per class seen in both.
	TrainMax      int64                 `json:"train_max_tokens"`
	TestMin       int64                 `json:"test_min_tokens"`
	Extrapolation []TransferClassResult `json:"extrapolation"`
	// Service is what the service itself publishes for these samples: its
	// store (default options, its own 10% holdout), one retrain, and the
	// bundle's kv_transfer holdout figures, per class then overall.
	Service         []TransferClassResult `json:"service"`
	ServiceCoverage float64               `json:"service_holdout_coverage_percent"`
}

// EvaluateTransfer measures the transfer model on samples with a measured
// transfer (others are ignored).
func EvaluateTransfer(ctx context.Context, samples []features.Sample, opts TransferOptions) (*TransferReport, error) {
	opts.setDefaults()
	var pd []features.Sample
	r := &TransferReport{Classes: map[string]int{}, Seeds: opts.Seeds, Quantile: opts.Quantile,
		TrainMax: opts.TrainMax, TestMin: opts.TestMin}
	for _, s := range samples {
		if y, ok := s.Label(features.KVTransfer); ok && y > 0 {
			pd = append(pd, s)
			r.Classes[s.Transfer.Class().String()]++
		}
	}
	r.Samples = len(pd)
	if len(pd) < 20 {
		return nil, fmt.Errorf("kv transfer eval: %d samples with a measured transfer, need at least 20", len(pd))
	}
	cfg := fit.TransferOptions{BytesPerToken: opts.BytesPerToken}

	// Random 90/10 splits.
	perClass := map[string][]TransferClassResult{}
	for seed := range opts.Seeds {
		rng := rand.New(rand.NewPCG(uint64(seed)+1, 0x7ea5))
		idx := rng.Perm(len(pd))
		cut := len(pd) / 10
		test, train := pick(pd, idx[:cut]), pick(pd, idx[cut:])
		m, err := fit.TransferLaw(ctx, train, test, cfg, opts.Quantile)
		if err != nil {
			return nil, fmt.Errorf("kv transfer eval, split %d: %w", seed, err)
		}
		h := m.Holdout
		r.Holdout.TrainRows += len(train)
		r.Holdout.TestRows += h.Rows
		r.Holdout.MAPE += h.MAPE
		r.Holdout.MedianAPE += h.MedianAPE
		r.Holdout.Bias += h.Bias
		if c := m.HoldoutCoverage; c != nil {
			r.Coverage += c.Percent
		}
		for _, k := range m.Classes {
			perClass[k.Class] = append(perClass[k.Class], TransferClassResult{Class: k.Class, TrainRows: k.Samples,
				TestRows: k.Holdout.Rows, MAPE: k.Holdout.MAPE, MedianAPE: k.Holdout.MedianAPE, Bias: k.Holdout.Bias,
				BytesPerSec: k.BytesPerSec})
		}
	}
	n := float64(opts.Seeds)
	r.Holdout = TransferClassResult{Class: "all", TrainRows: r.Holdout.TrainRows / opts.Seeds,
		TestRows: r.Holdout.TestRows / opts.Seeds, MAPE: r.Holdout.MAPE / n, MedianAPE: r.Holdout.MedianAPE / n,
		Bias: r.Holdout.Bias / n}
	r.Coverage /= n
	for c := range features.NumLinkClasses {
		rs := perClass[c.String()]
		if len(rs) == 0 {
			continue
		}
		mean := TransferClassResult{Class: c.String(), BytesPerSec: rs[0].BytesPerSec}
		for _, x := range rs {
			mean.TrainRows += x.TrainRows
			mean.TestRows += x.TestRows
			mean.MAPE += x.MAPE / float64(len(rs))
			mean.MedianAPE += x.MedianAPE / float64(len(rs))
			mean.Bias += x.Bias / float64(len(rs))
		}
		mean.TrainRows /= len(rs)
		mean.TestRows /= len(rs)
		r.HoldoutByClass = append(r.HoldoutByClass, mean)
	}

	if err := r.throughService(ctx, pd, cfg); err != nil {
		return nil, err
	}

	// Extrapolation across transfer sizes.
	var short, long []features.Sample
	for _, s := range pd {
		switch {
		case s.Transfer.Tokens <= opts.TrainMax:
			short = append(short, s)
		case s.Transfer.Tokens > opts.TestMin:
			long = append(long, s)
		}
	}
	if len(short) == 0 || len(long) == 0 {
		return r, nil
	}
	m, err := fit.TransferLaw(ctx, short, nil, cfg, opts.Quantile)
	if err != nil {
		return nil, fmt.Errorf("kv transfer eval, extrapolation: %w", err)
	}
	for _, k := range m.Classes {
		c, _ := features.ParseLinkClass(k.Class)
		var pred, actual []float64
		for _, s := range long {
			if s.Transfer.Class() != c {
				continue
			}
			y, ok := m.Predict(c, s.Transfer.Tokens, s.Transfer.BytesPerToken, s.Transfer.Concurrent)
			if ok {
				pred, actual = append(pred, y), append(actual, s.Transfer.Ms)
			}
		}
		if len(actual) == 0 {
			continue
		}
		q := model.Measure(pred, actual)
		r.Extrapolation = append(r.Extrapolation, TransferClassResult{Class: k.Class, TrainRows: k.Samples,
			TestRows: q.Rows, MAPE: q.MAPE, MedianAPE: q.MedianAPE, Bias: q.Bias, BytesPerSec: k.BytesPerSec})
	}
	return r, nil
}

// throughService stores the samples in a fresh store with the service's
// defaults, retrains once, and reads the published transfer model's
// holdout figures.
func (r *TransferReport) throughService(ctx context.Context, samples []features.Sample, cfg fit.TransferOptions) error {
	dir, err := os.MkdirTemp("", "headroom-eval-transfer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := store.Open(filepath.Join(dir, "samples.db"), replayStore(store.Options{NoSync: true}))
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Add(samples); err != nil {
		return fmt.Errorf("kv transfer eval, store: %w", err)
	}
	tr, err := trainer.New(trainer.Config{Transfer: cfg, Gate: replayGate()}, db) // linear per-pod models: only the transfer is read
	if err != nil {
		return err
	}
	pub, err := tr.Retrain(ctx)
	if err != nil {
		return fmt.Errorf("kv transfer eval, retrain: %w", err)
	}
	if pub == nil || pub.Bundle.Transfer == nil {
		return fmt.Errorf("kv transfer eval: the service published no transfer model (status %+v)", tr.Status().Targets["kv_transfer"])
	}
	m := pub.Bundle.Transfer
	for _, k := range m.Classes {
		r.Service = append(r.Service, TransferClassResult{Class: k.Class, TrainRows: k.Samples, TestRows: k.Holdout.Rows,
			MAPE: k.Holdout.MAPE, MedianAPE: k.Holdout.MedianAPE, Bias: k.Holdout.Bias, BytesPerSec: k.BytesPerSec})
	}
	r.Service = append(r.Service, TransferClassResult{Class: "all", TrainRows: m.TrainSamples, TestRows: m.Holdout.Rows,
		MAPE: m.Holdout.MAPE, MedianAPE: m.Holdout.MedianAPE, Bias: m.Holdout.Bias})
	if c := m.HoldoutCoverage; c != nil {
		r.ServiceCoverage = c.Percent
	}
	return nil
}

func pick(s []features.Sample, idx []int) []features.Sample {
	out := make([]features.Sample, len(idx))
	for i, j := range idx {
		out[i] = s[j]
	}
	return out
}

// WriteTransferTable prints a TransferReport for a reader.
func WriteTransferTable(w io.Writer, r *TransferReport) error {
	classes := slices.Sorted(func(yield func(string) bool) {
		for c := range r.Classes {
			if !yield(c) {
				return
			}
		}
	})
	fmt.Fprintf(w, "%d samples with a measured KV transfer:", r.Samples)
	for _, c := range classes {
		fmt.Fprintf(w, " %s %d", c, r.Classes[c])
	}
	fmt.Fprintf(w, "\n\nrandom 90/10 splits, mean of %d seeds\n", r.Seeds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "class\ttrain rows\ttest rows\tMAPE %\tmedian APE %\tmedian bias %\tbandwidth GB/s\t")
	row := func(x TransferClassResult) {
		bw := "-"
		if x.BytesPerSec > 0 {
			bw = fmt.Sprintf("%.3g", x.BytesPerSec/1e9)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%+.2f\t%s\t\n", x.Class, x.TrainRows, x.TestRows, x.MAPE, x.MedianAPE, x.Bias, bw)
	}
	for _, x := range r.HoldoutByClass {
		row(x)
	}
	row(r.Holdout)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "holdout coverage of the p%g: %.1f%%\n", 100*r.Quantile, r.Coverage)
	if len(r.Service) > 0 {
		fmt.Fprintf(w, "\nthrough the service: its store (its own 10%% holdout, stratified by link class and size), one retrain\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "class\ttrain rows\ttest rows\tMAPE %\tmedian APE %\tmedian bias %\tbandwidth GB/s\t")
		for _, x := range r.Service {
			row(x)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "holdout coverage of the p%g: %.1f%%\n", 100*r.Quantile, r.ServiceCoverage)
	}
	fmt.Fprintf(w, "\nextrapolation: trained on transfers of <= %d tokens, tested on > %d\n", r.TrainMax, r.TestMin)
	if len(r.Extrapolation) == 0 {
		fmt.Fprintln(w, "(no class has transfers on both sides)")
		return nil
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "class\ttrain rows\ttest rows\tMAPE %\tmedian APE %\tmedian bias %\tbandwidth GB/s\t")
	for _, x := range r.Extrapolation {
		row(x)
	}
	return tw.Flush()
}

// FromPDSample is a P/D request as a routing sidecar reports it (sim's
// PDSample, the shape of `headroom whatif --pd-samples`) as a training
// sample; ok is false for a request without a measured transfer.
func FromPDSample(p sim.PDSample) (features.Sample, bool) {
	if !(p.ActualKVTransferMs > 0) || p.PrefillTopology == nil {
		return features.Sample{}, false
	}
	return features.Sample{
		Row:          features.Row{InputTokenLength: int64(p.InputTokenLength), PodType: "decode"},
		ActualTTFTMs: p.ActualTTFTMs,
		ActualTPOTMs: p.ActualTPOTMs,
		Transfer: &features.Transfer{Ms: p.ActualKVTransferMs, Tokens: int64(p.KVTransferTokens),
			BytesPerToken: p.KVBytesPerToken, PrefillPod: p.PrefillPod, DecodePod: p.DecodePod,
			Prefill: *p.PrefillTopology, Decode: p.DecodeTopology, Concurrent: int64(p.ConcurrentTransfers)},
	}, true
}

// ReadPDSamples reads a --pd-samples JSONL file, keeping the requests with
// a measured transfer.
func ReadPDSamples(r io.Reader) ([]features.Sample, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var out []features.Sample
	for line := 1; sc.Scan(); line++ {
		var p sim.PDSample
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("p/d samples line %d: %w", line, err)
		}
		if s, ok := FromPDSample(p); ok {
			out = append(out, s)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("p/d samples: %w", err)
	}
	return out, nil
}

// SimulatedTransferRuns are the disaggregated runs SimulateTransfers
// samples: the agentic workload (its transfers reach about 8,000 tokens,
// where the chat workload's stay under 1,500) on one node (NVLink) and across two zones of
// two racks (same-rack, same-zone and cross-zone links), at a calm and a
// busy arrival rate (transfers sharing links), 4 prefill and 4 decode pods,
// routed as llm-d does today (greedy).
var SimulatedTransferRuns = []struct {
	Layout string
	Rate   float64
}{{"one-node", 4}, {"zones", 4}, {"zones", 12}}

// SimulateTransfers runs SimulatedTransferRuns with workload seed seed and
// returns every request with a measured transfer.
func SimulateTransfers(ctx context.Context, seed uint64, sessions int) ([]features.Sample, error) {
	var out []features.Sample
	for i, run := range SimulatedTransferRuns {
		o := workload.DefaultAgentic(run.Rate)
		o.Sessions, o.Seed = sessions, seed*31+uint64(i)
		reqs, err := workload.Agentic(o)
		if err != nil {
			return nil, err
		}
		pre, dec, err := sim.PlacePods(run.Layout, 4, 4)
		if err != nil {
			return nil, err
		}
		engine := sim.DefaultConfig()
		cfg := sim.PDConfig{Prefill: engine, Decode: engine, PrefillPods: pre, DecodePods: dec,
			Links: sim.DefaultLinks(), KVBytesPerToken: sim.DefaultKVBytesPerToken, Seed: seed}
		results, err := sim.ComparePD(ctx, reqs, cfg, []string{"greedy"})
		if err != nil {
			return nil, fmt.Errorf("simulate %s at %g/s: %w", run.Layout, run.Rate, err)
		}
		for _, res := range results {
			for _, o := range res.Outcomes {
				if s, ok := FromPDSample(o.Sample()); ok {
					out = append(out, s)
				}
			}
		}
	}
	return out, nil
}
