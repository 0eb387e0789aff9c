package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/headroomhq/headroom/features"
)

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// WriteTable writes the report as aligned text: a heading with the
// settings, then one line per target and model, each with its MAPE as a
// ratio to Headroom's on the same rows.
func WriteTable(w io.Writer, r *Report) error {
	var head []string
	head = append(head, "mode "+r.Mode)
	if r.Trace != "" {
		head = append(head, "trace "+r.Trace)
	}
	head = append(head, "scheme "+r.Scheme)
	switch r.Mode {
	case ModeSplit:
		head = append(head, fmt.Sprintf("%d seeds", r.Seeds))
	case ModePrequential:
		head = append(head, fmt.Sprintf("retrain every %d rows", r.Every))
	case ModeFloor:
		head = append(head, fmt.Sprintf("blocks of %d rows left out", r.Every))
	case ModeExtrapolate:
		head = append(head, fmt.Sprintf("train prompt <= %d, test > %d", r.TrainMax, r.TestMin))
		if r.Every > 0 {
			head = append(head, fmt.Sprintf("trained as served, every %d rows", r.Every))
		}
	}
	if r.Mode != ModeFloor {
		head = append(head, fmt.Sprintf("%d retrains", r.Retrains))
	}
	head = append(head, fmt.Sprintf("%.1f s", r.Seconds))
	if _, err := fmt.Fprintln(w, strings.Join(head, ", ")); err != nil {
		return err
	}
	if err := writeResults(w, r.Results, r.Quantile); err != nil {
		return err
	}
	if len(r.Chosen) > 0 {
		for _, t := range features.PodTargets {
			if c := r.ChosenSummary(t.String()); c != "" {
				if _, err := fmt.Fprintf(w, "%s configurations chosen (models): %s\n", t, c); err != nil {
					return err
				}
			}
		}
	}
	if len(r.Floors) > 0 {
		if _, err := fmt.Fprintf(w, "\nfloor (--mode floor on the same rows: the lowest MAPE of estimators that see every other row, the future included):\n"); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "target\tfloor %%\testimator\theadroom %%\theadroom / floor\t\n")
		for _, f := range r.Floors {
			fmt.Fprintf(tw, "%s\t%.2f\t%s\t%.2f\t%.2fx\t\n", f.Target, f.MAPE, f.Model, f.Headroom, f.Ratio)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.EarlyLife) > 0 {
		if _, err := fmt.Fprintf(w, "\nearly life (models trained on fewer than %d samples):\n", EarlyLifeMax); err != nil {
			return err
		}
		return writeResults(w, r.EarlyLife, r.Quantile)
	}
	return nil
}

func writeResults(w io.Writer, rs []Result, q float64) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "target\tmodel\trows\tMAPE %%\tmedian APE %%\tp90 APE %%\tbias %%\tcoverage@%g %%\tbound +%%\tMAPE / headroom\t\n", q)
	for _, r := range rs {
		cov := "-"
		if r.Coverage != nil {
			cov = fmt.Sprintf("%.1f", *r.Coverage)
		}
		width := "-"
		if r.BoundWidth != nil {
			width = fmt.Sprintf("%+.1f", *r.BoundWidth)
		}
		ratio := "-"
		for _, h := range rs {
			if h.Target == r.Target && h.Model == ModelHeadroom && h.MAPE > 0 {
				ratio = fmt.Sprintf("%.2fx", r.MAPE/h.MAPE)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.2f\t%.2f\t%+.2f\t%s\t%s\t%s\t\n",
			r.Target, r.Model, r.Rows, r.MAPE, r.MedianAPE, r.P90APE, r.Bias, cov, width, ratio)
	}
	return tw.Flush()
}
