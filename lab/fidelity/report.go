package fidelity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/headroomhq/headroom/internal/orderedjson"
)

// Report is a comparison of runs: every row, and each stage metric's
// summary over the stages that were not overloaded.
type Report struct {
	Rows    []Row
	Summary map[string]Summary
}

// NewReport summarises rows.
func NewReport(rows []Row) Report { return Report{Rows: rows, Summary: Summarize(rows)} }

// MarshalJSON writes {"rows": [...], "summary": {metric: {...}}}, the
// summary's metrics in the table's order; errors that are not numbers
// (no measurement) are null.
func (r Report) MarshalJSON() ([]byte, error) {
	type rowJSON struct {
		Run        string   `json:"run"`
		Stage      string   `json:"stage"`
		Metric     string   `json:"metric"`
		Predicted  *float64 `json:"predicted"`
		Measured   *float64 `json:"measured"`
		APE        *float64 `json:"ape"`
		Hit        bool     `json:"hit"`
		Overloaded bool     `json:"overloaded"`
	}
	rows := make([]rowJSON, len(r.Rows))
	for i, x := range r.Rows {
		rows[i] = rowJSON{x.Run, x.Stage, x.Metric, number(x.Predicted), number(x.Measured), number(x.APE), x.Hit, x.Overloaded}
	}
	type summaryJSON struct {
		N         int      `json:"n"`
		MedianAPE *float64 `json:"median_ape"`
		HitRate   *float64 `json:"hit_rate"`
	}
	summary := make(orderedjson.Object, 0, len(Metrics))
	for _, m := range Metrics {
		s := r.Summary[m]
		summary = append(summary, orderedjson.Field{Key: m, Value: summaryJSON{s.N, number(s.MedianAPE), number(s.HitRate)}})
	}
	return json.Marshal(orderedjson.Object{{Key: "rows", Value: rows}, {Key: "summary", Value: summary}})
}

func number(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// WriteJSON writes the report, indented.
func WriteJSON(w io.Writer, r Report) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("fidelity json: %w", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, data, "", "  "); err != nil {
		return fmt.Errorf("fidelity json: %w", err)
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

// WriteTable writes one line per row (predicted, measured, signed and
// absolute error, hit or miss), then one summary line per stage metric
// over the stages that were not overloaded, then the overloaded stages'
// lines apart.
func WriteTable(w io.Writer, r Report) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tstage\tmetric\tpredicted\tmeasured\terror\t|error|\t\t")
	line := func(x Row) {
		mark := "miss"
		if x.Hit {
			mark = "hit"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", x.Run, x.Stage, x.Metric, figure(x.Metric, x.Predicted),
			figure(x.Metric, x.Measured), pct(x.Signed, true), pct(x.APE, false), mark)
	}
	for _, x := range r.Rows {
		if !x.Overloaded {
			line(x)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&buf, "\nover the stages not overloaded (a hit: within %d%%):\n", HitAPE)
	tw = tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "metric\tstages\tmedian |error|\thits\t")
	for _, m := range Metrics {
		s := r.Summary[m]
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t\n", m, s.N, pct(s.MedianAPE, false), pct(100*s.HitRate, false))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var over []Row
	for _, x := range r.Rows {
		if x.Overloaded {
			over = append(over, x)
		}
	}
	if len(over) > 0 {
		fmt.Fprintf(&buf, "\noverloaded stages (failures, or TTFT above a minute; failures a hit within a factor of 2):\n")
		tw = tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "run\tstage\tmetric\tpredicted\tmeasured\terror\t|error|\t\t")
		for _, x := range over {
			line(x)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func figure(metric string, v float64) string {
	switch {
	case math.IsNaN(v):
		return "--"
	case metric == Failures:
		return fmt.Sprintf("%.0f", v)
	case metric == Throughput:
		return fmt.Sprintf("%.3g/s", v)
	case v >= 1000:
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.3g ms", v)
}

func pct(v float64, signed bool) string {
	switch {
	case math.IsNaN(v):
		return "--"
	case math.IsInf(v, 0):
		return "inf"
	case signed:
		return strings.Replace(fmt.Sprintf("%+.1f%%", v), "+0.0", "0.0", 1)
	}
	return fmt.Sprintf("%.1f%%", v)
}
