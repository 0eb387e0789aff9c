package demo

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Plot file names WritePlots writes.
const (
	PlotTTFTP50   = "ttft_p50.svg"
	PlotTTFTP95   = "ttft_p95.svg"
	PlotSLO       = "slo_attainment.svg"
	PlotPredicted = "predicted_vs_actual.svg"
)

// scatterPointsPerRate caps the points the scatter draws per rate (every
// k-th routed request), so that the SVG stays small enough to read.
const scatterPointsPerRate = 300

// WritePlots writes the sweep's charts into dir as SVG and returns their
// paths: TTFT p50 and p95 against offered load (one line per policy), SLO
// attainment against load when SLOs are set, and the predicted policy's
// predicted against actual TTFT of the requests it routed.
func WritePlots(dir string, s *Sweep) ([]string, error) { return writePlots(dir, s, ".svg") }

// writePlots writes the charts in the format of ext (any gonum/plot
// supports: .svg, .png, .pdf).
func writePlots(dir string, s *Sweep, ext string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plots: %w", err)
	}
	var paths []string
	save := func(c chart, name string) error {
		path := filepath.Join(dir, strings.TrimSuffix(name, ".svg")+ext)
		if err := c.save(path, strings.TrimPrefix(ext, ".")); err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		paths = append(paths, path)
		return nil
	}
	sub := fmt.Sprintf("%d servers, burstiness %.3g, seed %d", s.Servers, s.Burstiness, s.Seed)
	for _, c := range []struct {
		file, title string
		get         func(*PolicyResult) float64
	}{
		{PlotTTFTP50, "TTFT p50", func(p *PolicyResult) float64 { return p.TTFTP50Ms }},
		{PlotTTFTP95, "TTFT p95", func(p *PolicyResult) float64 { return p.TTFTP95Ms }},
	} {
		p, err := loadChart(s, c.title+" against offered load ("+sub+")", "TTFT (ms, log scale)", true, c.get)
		if err != nil {
			return nil, err
		}
		if err := save(p, c.file); err != nil {
			return nil, err
		}
	}
	if s.SLO.Set() {
		p, err := loadChart(s, "SLO attainment ("+sloString(s.SLO)+"; "+sub+")", "requests meeting the SLO (%)", false,
			func(p *PolicyResult) float64 {
				if p.SLOAttainment == nil {
					return math.NaN()
				}
				return 100 * *p.SLOAttainment
			})
		if err != nil {
			return nil, err
		}
		if err := save(p, PlotSLO); err != nil {
			return nil, err
		}
	}
	p, err := scatterChart(s, "predicted policy: predicted against actual TTFT of routed requests ("+sub+")")
	if err != nil {
		return nil, err
	}
	if err := save(p, PlotPredicted); err != nil {
		return nil, err
	}
	return paths, nil
}

// chart is a plot and its legend, which is drawn beside the plot rather
// than over the lines.
type chart struct {
	plot   *plot.Plot
	legend plot.Legend
}

func newChart(title, xlabel, ylabel string) chart {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text, p.Y.Label.Text = xlabel, ylabel
	p.Add(plotter.NewGrid())
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	return chart{plot: p, legend: l}
}

// legendWidth is the room kept right of the plot for the legend.
const legendWidth = 1.6 * vg.Inch

func (c chart) save(path, format string) error {
	w, h := 8.5*vg.Inch, 4.5*vg.Inch
	canvas, err := draw.NewFormattedCanvas(w, h, format)
	if err != nil {
		return err
	}
	dc := draw.New(canvas)
	c.plot.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	c.legend.Draw(draw.Crop(dc, w-legendWidth+vg.Points(6), 0, 0, -vg.Points(24)))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := canvas.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// logTicks labels a log axis at 1, 2 and 5 times each power of ten (every
// tick when the axis spans less than a decade), with unlabelled ticks
// between: latencies here span a decade or two, where labels at powers of
// ten alone would leave one label or none.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	dense := hi/lo < 10
	for dec := math.Pow10(int(math.Floor(math.Log10(lo)))); dec <= hi; dec *= 10 {
		for i := 1; i < 10; i++ {
			v := dec * float64(i)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if dense || i == 1 || i == 2 || i == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// loadChart draws one line per policy of get against the rate.
func loadChart(s *Sweep, title, ylabel string, logY bool, get func(*PolicyResult) float64) (chart, error) {
	c := newChart(title, "offered load (requests/s)", ylabel)
	p := c.plot
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
	}
	var rates []plot.Tick
	for _, pt := range s.Points {
		rates = append(rates, plot.Tick{Value: pt.Rate, Label: strconv.FormatFloat(pt.Rate, 'g', -1, 64)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(rates)
	for i, name := range PoliciesFor(s.SLO) {
		var xys plotter.XYs
		for j, pt := range s.Points {
			if pr := s.Policy(j, name); pr != nil {
				if v := get(pr); !math.IsNaN(v) && (!logY || v > 0) {
					xys = append(xys, plotter.XY{X: pt.Rate, Y: v})
				}
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return chart{}, fmt.Errorf("plot %s: %w", name, err)
		}
		l.Color, l.Width = plotutil.Color(i), vg.Points(1.5)
		l.Dashes = plotutil.Dashes(i)
		pts.Color, pts.Shape = plotutil.Color(i), plotutil.Shape(i)
		p.Add(l, pts)
		c.legend.Add(name, l, pts)
	}
	return c, nil
}

// scatterChart draws the predicted policy's routed requests, one colour per
// rate, against the line of perfect prediction, on log axes.
func scatterChart(s *Sweep, title string) (chart, error) {
	c := newChart(title, "predicted TTFT on the chosen server (ms, log scale)", "actual TTFT (ms, log scale)")
	p := c.plot
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = logTicks{}, logTicks{}
	lo, hi := math.Inf(1), math.Inf(-1)
	for j, pt := range s.Points {
		pr := s.Policy(j, Predicted)
		if pr == nil || len(pr.Points) == 0 {
			continue
		}
		every := max(1, len(pr.Points)/scatterPointsPerRate)
		var xys plotter.XYs
		for k := 0; k < len(pr.Points); k += every {
			q := pr.Points[k]
			if q.ExpectedMs > 0 && q.ActualMs > 0 {
				xys = append(xys, plotter.XY{X: q.ExpectedMs, Y: q.ActualMs})
				lo, hi = math.Min(lo, math.Min(q.ExpectedMs, q.ActualMs)), math.Max(hi, math.Max(q.ExpectedMs, q.ActualMs))
			}
		}
		if len(xys) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return chart{}, fmt.Errorf("scatter at %g: %w", pt.Rate, err)
		}
		sc.Color, sc.Shape, sc.Radius = plotutil.Color(j), plotutil.Shape(j), vg.Points(1.5)
		p.Add(sc)
		c.legend.Add(fmt.Sprintf("%g req/s", pt.Rate), sc)
	}
	if !math.IsInf(lo, 0) {
		diag, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo}, {X: hi, Y: hi}})
		if err != nil {
			return chart{}, fmt.Errorf("scatter diagonal: %w", err)
		}
		diag.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(diag)
		c.legend.Add("predicted = actual", diag)
	}
	return c, nil
}
