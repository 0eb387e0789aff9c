package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/eval"
	"github.com/headroomhq/headroom/model"
)

// Baselines are the plain models Headroom is judged against on every
// trace, in table order.
var Baselines = []string{eval.ModelXGBoost, eval.ModelXGBoostLog, eval.ModelLinear}

// Line is one trace × target × mode of a suite report.
type Line struct {
	Trace  string `json:"trace"`
	Regime string `json:"regime"`
	Part   string `json:"part"` // PartTune or PartHeldOut
	Target string `json:"target"`
	Mode   string `json:"mode"`
	Rows   int    `json:"rows"`
	// MAPE per model name, in percent: eval.ModelHeadroom and Baselines.
	MAPE map[string]float64 `json:"mape"`
	// Best is the baseline with the lowest MAPE, and Ratio Headroom's MAPE
	// over it: above 1, Headroom loses on this line; 0 when there is no
	// baseline to compare with.
	Best  string  `json:"best_baseline"`
	Ratio float64 `json:"ratio_to_best"`
	// Coverage is the share of rows at or below Headroom's quantile.
	Coverage float64 `json:"coverage"`
	// Floor is, on prequential TTFT and TPOT lines when the evaluation
	// estimates it (Settings.Floor), the lowest MAPE the floor's
	// estimators reach on the same rows (eval.Floor), FloorModel the
	// estimator, and FloorRatio Headroom's MAPE over it; 0 and "" elsewhere.
	Floor      float64 `json:"floor,omitempty"`
	FloorModel string  `json:"floor_model,omitempty"`
	FloorRatio float64 `json:"ratio_to_floor,omitempty"`
}

// Settings shape a suite evaluation. Zero Seeds and Every take the
// manifest's.
type Settings struct {
	Seeds, Every int
	// Floor estimates each trace's floor beside its prequential lines
	// (eval.Floor): about a third more time.
	Floor bool
}

// Report is a whole suite's evaluation.
type Report struct {
	Seeds    int     `json:"seeds"`
	Every    int     `json:"every"`
	Quantile float64 `json:"quantile"`
	Lines    []Line  `json:"lines"`
	Seconds  float64 `json:"seconds"`
}

// Evaluate replays every trace of a loaded suite in split mode (the
// manifest's seeds) and prequential mode (its cadence) with opts, and
// reports each trace × target × mode: TTFT and TPOT through package eval,
// and the KV transfer (transfer.go) on traces whose rows carry transfers;
// with set.Floor, each prequential TTFT and TPOT line beside its floor.
// progress, when not nil, gets a line per replay finished, because a whole
// suite takes minutes.
func Evaluate(ctx context.Context, m *Manifest, traces [][]features.Sample, opts eval.Options,
	set Settings, progress io.Writer) (*Report, error) {
	start := time.Now()
	seeds, every := set.Seeds, set.Every
	if seeds <= 0 {
		seeds = m.Eval.Seeds
	}
	if every <= 0 {
		every = m.Eval.Every
	}
	if len(traces) != len(m.Traces) {
		return nil, fmt.Errorf("evaluate suite: %d traces loaded for %d in the manifest", len(traces), len(m.Traces))
	}
	rep := &Report{Seeds: seeds, Every: every, Quantile: opts.Quantile}
	if rep.Quantile == 0 {
		rep.Quantile = model.DefaultQuantile
	}
	for i := range m.Traces {
		t := &m.Traces[i]
		for _, mode := range []string{eval.ModeSplit, eval.ModePrequential} {
			var (
				r   *eval.Report
				err error
			)
			if mode == eval.ModeSplit {
				r, err = eval.Split(ctx, traces[i], opts, seeds)
			} else {
				r, err = eval.Prequential(ctx, traces[i], opts, every)
			}
			if err != nil {
				return nil, fmt.Errorf("evaluate suite: %s %s: %w", t.Name, mode, err)
			}
			if mode == eval.ModePrequential && set.Floor {
				floor, err := eval.Floor(ctx, traces[i], opts, every)
				if err == nil {
					err = r.BesideFloor(floor)
				}
				if err != nil {
					return nil, fmt.Errorf("evaluate suite: %s floor: %w", t.Name, err)
				}
				if progress != nil {
					fmt.Fprintf(progress, "suite: %s floor done in %.1f s\n", t.Name, floor.Seconds)
				}
			}
			var lines []Line
			for _, target := range features.PodTargets {
				if line, ok := lineOf(r, target); ok {
					line.Mode = mode
					lines = append(lines, line)
				}
			}
			// The KV-transfer target, on traces whose rows carry transfers.
			tOpts := opts
			tOpts.Quantile = rep.Quantile
			var (
				tl  Line
				tok bool
			)
			if mode == eval.ModeSplit {
				tl, tok, err = transferSplit(ctx, traces[i], tOpts, seeds)
			} else {
				tl, tok, err = transferPrequential(ctx, traces[i], tOpts, every)
			}
			if err != nil {
				return nil, fmt.Errorf("evaluate suite: %s %s: %w", t.Name, mode, err)
			}
			if tok {
				lines = append(lines, tl)
			}
			for _, line := range lines {
				line.Trace, line.Regime, line.Part = t.Name, t.Regime, m.Part(t)
				rep.Lines = append(rep.Lines, line)
			}
			if progress != nil {
				fmt.Fprintf(progress, "suite: %s %s done in %.1f s\n", t.Name, mode, r.Seconds)
			}
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// lineOf extracts a target's figures from one replay; false when Headroom
// scored no rows of it.
func lineOf(r *eval.Report, target features.Target) (Line, bool) {
	h := r.Find(target, eval.ModelHeadroom)
	if h == nil || h.Rows == 0 {
		return Line{}, false
	}
	l := Line{Target: target.String(), Rows: h.Rows, MAPE: map[string]float64{eval.ModelHeadroom: h.MAPE}}
	if h.Coverage != nil {
		l.Coverage = *h.Coverage
	}
	for _, f := range r.Floors {
		if f.Target == l.Target {
			l.Floor, l.FloorModel, l.FloorRatio = f.MAPE, f.Model, f.Ratio
		}
	}
	best := math.Inf(1)
	for _, b := range Baselines {
		res := r.Find(target, b)
		if res == nil {
			continue
		}
		l.MAPE[b] = res.MAPE
		if res.MAPE < best {
			best, l.Best = res.MAPE, b
		}
	}
	if l.Best != "" && best > 0 {
		l.Ratio = h.MAPE / best
	}
	return l, true
}

// Losses returns the lines on which Headroom's MAPE is above the best
// baseline's.
func (r *Report) Losses() []Line {
	var out []Line
	for _, l := range r.Lines {
		if l.Ratio > 1 {
			out = append(out, l)
		}
	}
	return out
}

// WriteTable writes the report as one aligned table, a line per trace ×
// target × mode, then a count of the lines Headroom loses per part.
func WriteTable(w io.Writer, r *Report) error {
	if _, err := fmt.Fprintf(w, "suite: split over %d seeds, prequential retraining every %d rows, %d lines, %.1f s\n",
		r.Seeds, r.Every, len(r.Lines), r.Seconds); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	floors := false
	for _, l := range r.Lines {
		floors = floors || l.Floor > 0
	}
	fmt.Fprintf(tw, "trace\tpart\ttarget\tmode\trows\theadroom %%\txgboost %%\txgboost-log %%\tlinear %%\tbest plain\theadroom / best\tcoverage@%g %%\t", r.Quantile)
	if floors {
		fmt.Fprint(tw, "floor %\theadroom / floor\t")
	}
	fmt.Fprintln(tw)
	for _, l := range r.Lines {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%.2f", l.Trace, l.Part, l.Target, l.Mode, l.Rows, l.MAPE[eval.ModelHeadroom])
		for _, b := range Baselines {
			if v, ok := l.MAPE[b]; ok {
				fmt.Fprintf(tw, "\t%.2f", v)
			} else {
				fmt.Fprint(tw, "\t-")
			}
		}
		verdict := "-"
		if l.Ratio > 0 {
			verdict = fmt.Sprintf("%.2fx", l.Ratio)
		}
		if l.Ratio > 1 {
			verdict += " LOSES"
		}
		fmt.Fprintf(tw, "\t%s\t%s\t%.1f\t", l.Best, verdict, l.Coverage)
		if floors {
			if l.Floor > 0 {
				fmt.Fprintf(tw, "%.2f\t%.2fx\t", l.Floor, l.FloorRatio)
			} else {
				fmt.Fprint(tw, "-\t-\t")
			}
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	lost := map[string]int{}
	total := map[string]int{}
	for _, l := range r.Lines {
		total[l.Part]++
	}
	for _, l := range r.Losses() {
		lost[l.Part]++
	}
	if _, err := fmt.Fprintf(w, "headroom above the best plain model on %d of %d tune lines and %d of %d held-out lines\n",
		lost[PartTune], total[PartTune], lost[PartHeldOut], total[PartHeldOut]); err != nil {
		return err
	}
	if !floors {
		return nil
	}
	far, withFloor := map[string]int{}, map[string]int{}
	for _, l := range r.Lines {
		if l.Floor > 0 {
			withFloor[l.Part]++
			if l.FloorRatio > FloorRatioTarget {
				far[l.Part]++
			}
		}
	}
	_, err := fmt.Fprintf(w, "headroom above %.2fx its floor on %d of %d tune lines and %d of %d held-out lines\n",
		FloorRatioTarget, far[PartTune], withFloor[PartTune], far[PartHeldOut], withFloor[PartHeldOut])
	return err
}

// FloorRatioTarget is the most, as a multiple of a trace's floor, that
// Headroom's prequential MAPE should be (issue 25's target): the table's
// last line counts the lines above it.
const FloorRatioTarget = 1.15

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write suite report: %w", err)
	}
	return nil
}
