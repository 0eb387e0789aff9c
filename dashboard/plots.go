package dashboard

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/trainer"
)

// Colours, one per series kind, the same on every plot of the page: each
// target its own, in the order of features.Targets.
var (
	targetColors = []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
		color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	}
	colorFailed = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colorGuide  = color.RGBA{R: 0x88, G: 0x88, B: 0x88, A: 0xff}
	colorUp     = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	colorDown   = color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
)

func targetColor(t features.Target) color.Color { return targetColors[int(t)%len(targetColors)] }

// plotWidth is every plot's width: the page shows SVGs at their natural
// size (or smaller on a narrow screen), so equal widths keep every plot's
// text the same size.
const plotWidth = 6 * vg.Inch

// logTicks labels a log axis at 1, 2 and 5 times powers of ten, with
// unlabelled ticks between: plot.LogTicks labels powers of ten only, which
// leaves one label or none on a latency range such as 30-300 ms.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi > lo) {
		return nil
	}
	// 1-2-5 labels, or every multiple on a range too narrow for three of
	// those, or linear ticks on one narrower still (12-30 ms, say).
	for _, labelled := range [][]int{{1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}} {
		var ticks []plot.Tick
		n := 0
		for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
			decade := math.Pow(10, e)
			for m := 1; m <= 9; m++ {
				v := float64(m) * decade
				if v < lo || v > hi {
					continue
				}
				t := plot.Tick{Value: v}
				if slices.Contains(labelled, m) {
					t.Label = strconv.FormatFloat(v, 'g', -1, 64)
					n++
				}
				ticks = append(ticks, t)
			}
		}
		if n >= 3 {
			return ticks
		}
	}
	return plainTicks.Ticks(lo, hi)
}

// roomForLegend raises the top of the y axis so the legend, drawn in the
// top right corner, does not cover the newest points.
func roomForLegend(p *plot.Plot) {
	p.Y.Max = p.Y.Min + 1.4*(p.Y.Max-p.Y.Min)
	p.Legend.Left = true
}

// plainTicks are plot's default ticks with labels in the shortest form
// (25, not 25.00).
var plainTicks = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', 6, 64)
		}
	}
	return ticks
})

// errNoData means a plot has nothing to draw yet; the page says so in
// words instead.
var errNoData = errors.New("no data yet")

// newPlot returns a plot in the page's sans-serif face (plot's default is
// a serif).
func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	sans := func(f *font.Font) { f.Variant = "Sans" }
	sans(&p.Title.TextStyle.Font)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		sans(&a.Label.TextStyle.Font)
		sans(&a.Tick.Label.Font)
	}
	sans(&p.Legend.TextStyle.Font)
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xLabel, yLabel
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Legend.Top = true
	return p
}

// svg draws p as an SVG element for inlining in the page: no XML prolog,
// and a font list that falls back to the metric-compatible Arial where
// Liberation Sans is not installed (the page embeds no fonts).
func svg(p *plot.Plot, w, h vg.Length) (svg template.HTML, err error) {
	defer func() {
		// gonum/plot panics on some degenerate inputs (an empty log
		// range, for one): a page with one plot missing beats no page.
		if r := recover(); r != nil {
			err = fmt.Errorf("draw %q: %v", p.Title.Text, r)
		}
	}()
	c := vgsvg.New(w, h)
	p.Draw(draw.New(c))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return "", fmt.Errorf("draw %q: %w", p.Title.Text, err)
	}
	s := b.String()
	if i := strings.Index(s, "<svg"); i > 0 {
		s = s[i:]
	}
	s = strings.ReplaceAll(s, "font-family:Liberation Sans;", "font-family:'Liberation Sans',Arial,Helvetica,sans-serif;")
	// vgsvg escapes text it draws; everything else is numbers.
	return template.HTML(s), nil
}

// holdoutPlot draws predicted against measured latency on the holdout, on
// log axes with the line of perfect prediction and ±25% beside it.
func holdoutPlot(tv Target) (template.HTML, error) {
	var xys plotter.XYs
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, pt := range tv.Holdout {
		if pt.Actual > 0 && pt.Predicted > 0 {
			xys = append(xys, plotter.XY{X: pt.Actual, Y: pt.Predicted})
			lo, hi = min(lo, pt.Actual, pt.Predicted), max(hi, pt.Actual, pt.Predicted)
		}
	}
	if len(xys) == 0 {
		return "", errNoData
	}
	if hi <= lo*1.01 {
		lo, hi = lo/1.5, hi*1.5
	}
	name := tv.Target.Title()
	p := newPlot(fmt.Sprintf("%s on the holdout: predicted vs measured (%d samples)", name, len(xys)),
		"measured "+name+" (ms)", "predicted "+name+" (ms)")
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Scale = plot.LogScale{}
		a.Tick.Marker = logTicks{}
		a.Min, a.Max = lo, hi
	}
	for _, g := range []struct {
		factor float64
		dashed bool
	}{{1, false}, {1.25, true}, {0.8, true}} {
		l, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo * g.factor}, {X: hi, Y: hi * g.factor}})
		if err != nil {
			return "", err
		}
		l.Color = colorGuide
		if g.dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
	}
	sc, err := plotter.NewScatter(xys)
	if err != nil {
		return "", err
	}
	sc.GlyphStyle.Color = withAlpha(targetColor(tv.Target), 0x70)
	sc.GlyphStyle.Radius = vg.Points(2)
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	p.Add(sc)
	return svg(p, plotWidth, 4.4*vg.Inch)
}

func withAlpha(c color.Color, a uint8) color.Color {
	r, g, b, _ := c.RGBA()
	return color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: a}
}

// mapePlot draws each target's holdout MAPE at every training run that
// produced a model, and the live MAPE of the model in service when each
// run started.
func mapePlot(runs []trainer.RetrainRecord) (template.HTML, error) {
	p := newPlot("Error over time: holdout and live MAPE", "time (UTC)", "MAPE (%)")
	p.X.Tick.Marker = plot.TimeTicks{Format: "15:04:05"}
	p.Y.Min = 0
	drawn := 0
	for _, tg := range features.Targets {
		var holdout, live plotter.XYs
		for _, r := range runs {
			if r.Target != tg {
				continue
			}
			x := float64(r.Start.Unix())
			if r.Fitted {
				holdout = append(holdout, plotter.XY{X: x, Y: r.HoldoutMAPE})
			}
			if r.HasLive {
				live = append(live, plotter.XY{X: x, Y: r.LiveMAPE})
			}
		}
		for _, series := range []struct {
			xys    plotter.XYs
			label  string
			dashed bool
		}{{holdout, "holdout", false}, {live, "live", true}} {
			if len(series.xys) == 0 {
				continue
			}
			l, s, err := plotter.NewLinePoints(series.xys)
			if err != nil {
				return "", err
			}
			l.Color, s.Color = targetColor(tg), targetColor(tg)
			s.Radius = vg.Points(1.5)
			if series.dashed {
				l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			}
			p.Add(l, s)
			p.Legend.Add(tg.Title()+" "+series.label, l, s)
			drawn++
		}
	}
	if drawn == 0 {
		return "", errNoData
	}
	roomForLegend(p)
	return svg(p, plotWidth, 3.6*vg.Inch)
}

// durationPlot draws how long each training run took, failures apart.
func durationPlot(runs []trainer.RetrainRecord) (template.HTML, error) {
	if len(runs) == 0 {
		return "", errNoData
	}
	p := newPlot("Training runs: wall time per target", "time (UTC)", "seconds")
	p.X.Tick.Marker = plot.TimeTicks{Format: "15:04:05"}
	p.Y.Min = 0
	groups := map[string]plotter.XYs{}
	for _, r := range runs {
		key := r.Target.String()
		if r.Err != "" {
			key = "failed"
		}
		groups[key] = append(groups[key], plotter.XY{X: float64(r.Start.Unix()), Y: r.Duration.Seconds()})
	}
	type series struct {
		key, name string
		c         color.Color
	}
	var all []series
	for _, tg := range features.Targets {
		all = append(all, series{tg.String(), tg.Title(), targetColor(tg)})
	}
	for _, g := range append(all, series{"failed", "FAILED", colorFailed}) {
		xys := groups[g.key]
		if len(xys) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return "", err
		}
		sc.GlyphStyle.Color = g.c
		sc.GlyphStyle.Radius = vg.Points(2.2)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		p.Add(sc)
		p.Legend.Add(g.name, sc)
	}
	roomForLegend(p)
	return svg(p, plotWidth, 3.6*vg.Inch)
}

// fillGrid adapts Fill to plotter.GridXYZ: columns are prefix levels,
// rows KV levels, the value the cell's sample count.
type fillGrid struct {
	f       *Fill
	largest int
}

func (g fillGrid) Dims() (c, r int)   { return len(g.f.Counts[0]), len(g.f.Counts) }
func (g fillGrid) Z(c, r int) float64 { return float64(g.f.Counts[r][c]) }
func (g fillGrid) X(c int) float64    { return float64(c) }
func (g fillGrid) Y(r int) float64    { return float64(r) }
func (g fillGrid) Min() float64       { return 0 }
func (g fillGrid) Max() float64       { return float64(max(g.largest, 1)) }

// blues is a light-to-dark sequential palette: an empty cell stays white.
type blues int

func (n blues) Colors() []color.Color {
	out := make([]color.Color, n)
	for i := range out {
		f := float64(i) / float64(n-1)
		out[i] = color.RGBA{R: uint8(255 - 200*f), G: uint8(255 - 140*f), B: uint8(255 - 60*f), A: 255}
	}
	return out
}

// fillPlot draws the store's training samples per KV-cache and
// prefix-cache level as a heat map, each cell labelled with its count.
func fillPlot(t features.Target, f *Fill) (template.HTML, error) {
	if f == nil || len(f.Counts) == 0 || len(f.Counts[0]) == 0 || f.PerCell <= 0 {
		return "", errNoData
	}
	total, largest := 0, 0
	for _, row := range f.Counts {
		for _, n := range row {
			total += n
			largest = max(largest, n)
		}
	}
	// Darker is fuller; a cell holds at most PerCell samples, beyond which
	// it forgets its oldest.
	p := newPlot(fmt.Sprintf("%s store: %d training samples (at most %d a cell)", t.Title(), total, f.PerCell),
		"prefix-cache score", "KV-cache use")
	grid := fillGrid{f: f, largest: largest}
	p.Add(plotter.NewHeatMap(grid, blues(32)))
	var labels plotter.XYLabels
	cols, rows := grid.Dims()
	for r := range rows {
		for c := range cols {
			labels.XYs = append(labels.XYs, plotter.XY{X: float64(c), Y: float64(r)})
			labels.Labels = append(labels.Labels, fmt.Sprint(f.Counts[r][c]))
		}
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return "", err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].Font.Variant = "Sans"
		l.TextStyle[i].Font.Size = vg.Points(8)
		l.TextStyle[i].XAlign, l.TextStyle[i].YAlign = -0.5, -0.5
		if grid.Z(i%cols, i/cols) > 0.55*grid.Max() {
			l.TextStyle[i].Color = color.White
		}
	}
	p.Add(l)
	var xt, yt []plot.Tick
	for c := range cols {
		xt = append(xt, plot.Tick{Value: float64(c), Label: fmt.Sprintf("%d–%d%%", 100*c/cols, 100*(c+1)/cols)})
	}
	for r := range rows {
		yt = append(yt, plot.Tick{Value: float64(r), Label: fmt.Sprintf("%d–%d%%", 100*r/rows, 100*(r+1)/rows)})
	}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.ConstantTicks(xt), plot.ConstantTicks(yt)
	p.X.Min, p.X.Max = -0.5, float64(cols)-0.5
	p.Y.Min, p.Y.Max = -0.5, float64(rows)-0.5
	return svg(p, plotWidth, 4.4*vg.Inch)
}

// barPlot draws one horizontal bar per feature; positive and negative
// values get their own colour.
func barPlot(title, xLabel string, names []string, values []float64) (template.HTML, error) {
	if len(names) == 0 || len(names) != len(values) {
		return "", errNoData
	}
	pos, neg := make(plotter.Values, len(values)), make(plotter.Values, len(values))
	for i, v := range values {
		if v >= 0 {
			pos[i] = v
		} else {
			neg[i] = v
		}
	}
	p := newPlot(title, xLabel, "")
	width := vg.Points(12)
	for _, s := range []struct {
		v plotter.Values
		c color.Color
	}{{pos, colorUp}, {neg, colorDown}} {
		b, err := plotter.NewBarChart(s.v, width)
		if err != nil {
			return "", err
		}
		b.Horizontal = true
		b.Color = s.c
		b.LineStyle.Width = 0
		p.Add(b)
	}
	p.Add(plotter.NewGrid())
	p.NominalY(names...)
	p.X.Tick.Marker = plainTicks
	h := vg.Length(len(names))*vg.Points(20) + vg.Points(70)
	return svg(p, plotWidth, h)
}

// coefficientPlot draws the linear model's coefficients in milliseconds
// per standard deviation of each feature, the scale on which they compare.
func coefficientPlot(tv Target) (template.HTML, error) {
	m := tv.Model
	if m == nil || m.Linear == nil {
		return "", errNoData
	}
	return barPlot(tv.Target.Title()+" linear model: coefficient per feature",
		"ms per standard deviation of the feature", m.Columns, m.Linear.Coef)
}

// gainPlot draws each feature's share of the trees' total split gain.
func gainPlot(tv Target) (template.HTML, error) {
	m := tv.Model
	if m == nil || m.Trees == nil {
		return "", errNoData
	}
	gain := m.Trees.Gain()
	total := 0.0
	for _, g := range gain {
		total += max(g, 0)
	}
	if len(gain) != len(m.Columns) || total <= 0 {
		return "", errNoData
	}
	share := make([]float64, len(gain))
	for i, g := range gain {
		share[i] = 100 * max(g, 0) / total
	}
	return barPlot(fmt.Sprintf("%s trees: share of split gain per feature (%d trees)", tv.Target.Title(), m.Trees.NumTrees()),
		"% of total gain", m.Columns, share)
}

// plotOrNote is a plot, or the reason there is none, for the template.
type plotOrNote struct {
	SVG  template.HTML
	Note string
}

func render(f func() (template.HTML, error)) plotOrNote {
	s, err := f()
	switch {
	case errors.Is(err, errNoData):
		return plotOrNote{Note: "No data yet."}
	case err != nil:
		return plotOrNote{Note: "Could not draw: " + err.Error()}
	}
	return plotOrNote{SVG: s}
}

// age formats how long ago t was, coarsely.
func age(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds ago", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}
