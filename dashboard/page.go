package dashboard

import (
	"fmt"
	"html/template"
	"io"
	"slices"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/trainer"
)

// RecentRetrains is how many training runs the page lists.
const RecentRetrains = 20

// page is what the template reads: the snapshot with its plots drawn.
type page struct {
	Snapshot
	Title      string
	BundleAge  string
	LoadedAge  string
	Cards      []card
	MAPE       plotOrNote
	Durations  plotOrNote
	Recent     []retrainRow
	TotalRuns  int
	FailedRuns int
}

type card struct {
	Name     string
	Model    *model.TargetModel
	Transfer *model.TransferModel
	// Bandwidth says the law's per-byte term is a link's alone (the KV
	// transfer), shown as bandwidth; the split-TTFT law's holds the
	// prefill too, so it is shown as time per thousand tokens only.
	Bandwidth    bool
	PerPod       bool // Coefficients and Gain apply
	Status       *trainer.TargetStatus
	TrainedAge   string
	Holdout      plotOrNote
	Coefficients plotOrNote
	Gain         plotOrNote
	Fill         plotOrNote
	HasHoldout   bool
	HasFill      bool
}

type retrainRow struct {
	When, Target, Duration, Kind, Rows, HoldoutMAPE, LiveMAPE, Error string
	Failed                                                           bool
}

// Render writes the page for s: HTML with every plot inlined as SVG, one
// stylesheet in the head, nothing loaded from anywhere.
func Render(w io.Writer, s Snapshot) error {
	pg := page{Snapshot: s, Title: "Headroom " + s.Role}
	if s.Bundle != nil {
		pg.BundleAge = age(s.Now, s.Bundle.CreatedAt)
	}
	if !s.LoadedAt.IsZero() {
		pg.LoadedAge = age(s.Now, s.LoadedAt)
	}
	for _, tv := range s.Targets {
		c := card{
			Name: tv.Target.Title(), Model: tv.Model, Transfer: tv.Transfer, Status: tv.Status,
			Bandwidth:    tv.Target == features.KVTransfer,
			PerPod:       tv.Target.PerPod(),
			Coefficients: render(func() (template.HTML, error) { return coefficientPlot(tv) }),
			Gain:         render(func() (template.HTML, error) { return gainPlot(tv) }),
			HasHoldout:   s.Role == "trainer",
			HasFill:      tv.Fill != nil,
		}
		switch {
		case tv.Model != nil:
			c.TrainedAge = age(s.Now, tv.Model.TrainedAt)
		case tv.Transfer != nil:
			c.TrainedAge = age(s.Now, tv.Transfer.TrainedAt)
		}
		if c.HasHoldout {
			c.Holdout = render(func() (template.HTML, error) { return holdoutPlot(tv) })
		}
		if c.HasFill {
			c.Fill = render(func() (template.HTML, error) { return fillPlot(tv.Target, tv.Fill) })
		}
		pg.Cards = append(pg.Cards, c)
	}
	if s.Role == "trainer" {
		pg.MAPE = render(func() (template.HTML, error) { return mapePlot(s.Retrains) })
		pg.Durations = render(func() (template.HTML, error) { return durationPlot(s.Retrains) })
	}
	pg.TotalRuns = len(s.Retrains)
	for _, r := range s.Retrains {
		if r.Err != "" {
			pg.FailedRuns++
		}
	}
	recent := s.Retrains[max(0, len(s.Retrains)-RecentRetrains):]
	for _, r := range slices.Backward(recent) {
		row := retrainRow{
			When: r.Start.Format("15:04:05"), Target: r.Target.Title(),
			Duration: fmt.Sprintf("%.2f s", r.Duration.Seconds()), Kind: string(r.Kind),
			Error: r.Err, Failed: r.Err != "",
		}
		if r.Fitted {
			row.Rows = fmt.Sprint(r.TrainRows)
			row.HoldoutMAPE = fmt.Sprintf("%.1f%%", r.HoldoutMAPE)
		}
		if r.HasLive {
			row.LiveMAPE = fmt.Sprintf("%.1f%%", r.LiveMAPE)
		}
		pg.Recent = append(pg.Recent, row)
	}
	if err := pageTemplate.Execute(w, pg); err != nil {
		return fmt.Errorf("render dashboard: %w", err)
	}
	return nil
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"pct":  func(v float64) string { return fmt.Sprintf("%.1f%%", v) },
	"ms":   func(v float64) string { return fmt.Sprintf("%.2f ms", v) },
	"utc":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"gbps": func(bytesPerSec float64) float64 { return bytesPerSec / 1e9 },
	// msPer1k is the law's per-byte term as the time a thousand tokens
	// add, at the law's bytes per token.
	"msPer1k": func(bytesPerSec, bytesPerToken float64) float64 { return 1e6 * bytesPerToken / bytesPerSec },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="30">
<title>{{.Title}}</title>
<style>
body{font-family:'Liberation Sans',Arial,Helvetica,sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
header{background:#1d2330;color:#fff;padding:14px 24px;display:flex;flex-wrap:wrap;gap:8px 32px;align-items:baseline}
header h1{font-size:20px;margin:0 16px 0 0}
header .fact{font-size:14px;color:#c8cdd8}
header .fact b{color:#fff}
main{padding:16px 24px;max-width:1500px}
section{background:#fff;border-radius:6px;box-shadow:0 1px 2px rgba(0,0,0,.08);padding:12px 16px;margin:0 0 16px}
h2{font-size:17px;margin:4px 0 10px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(580px,1fr));gap:12px 20px;align-items:start;margin-top:14px}
svg{max-width:100%;height:auto;display:block}
table{border-collapse:collapse;font-size:13px;width:100%}
th,td{text-align:left;padding:3px 10px 3px 0;border-bottom:1px solid #e3e5ea;vertical-align:top}
th{color:#5a6275;font-weight:normal}
td.num{font-variant-numeric:tabular-nums}
.note{color:#5a6275;font-size:13px;padding:8px 0}
.bad{color:#b3261e}
.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:8px 12px;margin:0 0 16px;font-size:14px}
footer{color:#5a6275;font-size:12px;padding:0 24px 24px}
code{font-size:12px}
</style>
</head>
<body>
<header>
<h1>Headroom {{.Role}}</h1>
{{with .Bundle}}<span class="fact">bundle <b>v{{.Version}}</b> created {{$.BundleAge}}</span>{{else}}<span class="fact"><b>no model yet</b></span>{{end}}
{{if .LoadedAge}}<span class="fact">loaded {{.LoadedAge}}</span>{{end}}
{{if .TrainerURL}}<span class="fact">from <b>{{.TrainerURL}}</b></span>{{end}}
{{if eq .Role "trainer"}}<span class="fact">xgboost {{if .XGBoostAvailable}}<b>available</b>{{else}}<b class="bad">missing</b>{{end}}</span>
<span class="fact">{{.TotalRuns}} training runs shown{{if .FailedRuns}}, <b class="bad">{{.FailedRuns}} failed</b>{{end}}</span>{{end}}
<span class="fact">{{utc .Now}}</span>
</header>
<main>
{{if and (eq .Role "trainer") (not .XGBoostAvailable)}}<div class="warn">The xgboost binary is not available ({{.XGBoostError}}): models are linear only.</div>{{end}}
{{if not .Bundle}}<div class="warn">No model yet. The {{if eq .Role "trainer"}}trainer publishes its first bundle once a target has enough samples{{else}}predictor answers 503 until it has pulled a bundle from the trainer{{end}}.</div>{{end}}
{{range .Cards}}{{$card := .}}
<section>
<h2>{{.Name}}{{with .Model}} — {{.Kind}} model{{end}}{{if .Transfer}} — {{if .Bandwidth}}bandwidth law{{else}}latency and time per token{{end}} per link class{{end}}{{if .TrainedAge}}, trained {{.TrainedAge}}{{end}}</h2>
{{with .Transfer}}
<table>
<tr><th>holdout MAPE</th><th>median APE</th><th>p90 APE</th><th>MAE</th><th>bias</th><th>quantile coverage</th><th>train samples</th><th>held-out samples</th><th>trained at</th><th>fit time</th></tr>
<tr><td class="num">{{pct .Holdout.MAPE}}</td><td class="num">{{pct .Holdout.MedianAPE}}</td><td class="num">{{pct .Holdout.P90APE}}</td><td class="num">{{ms .Holdout.MAE}}</td><td class="num">{{pct .Holdout.Bias}}</td><td class="num">{{with .HoldoutCoverage}}{{pct .Percent}} at q={{.Quantile}}{{else}}—{{end}}</td><td class="num">{{.TrainSamples}}</td><td class="num">{{.Holdout.Rows}}</td><td>{{utc .TrainedAt}}</td><td class="num">{{printf "%.3f s" .TrainSeconds}}</td></tr>
</table>
<table>
<tr><th>link class</th>{{if $card.Bandwidth}}<th>bandwidth alone</th>{{end}}<th>per 1k tokens alone</th><th>latency</th><th>contention</th><th>tokens fitted</th><th>train samples</th><th>holdout MAPE</th></tr>
{{range .Classes}}<tr><td>{{.Class}}</td>{{if $card.Bandwidth}}<td class="num">{{printf "%.3g GB/s" (gbps .BytesPerSec)}}</td>{{end}}<td class="num">{{ms (msPer1k .BytesPerSec $card.Transfer.DefaultBytesPerToken)}}</td><td class="num">{{ms .LatencyMs}}</td><td class="num">{{printf "%.2f" .Contention}}</td><td class="num">{{printf "%.0f–%.0f" .Tokens.Min .Tokens.Max}}</td><td class="num">{{.Samples}}</td><td class="num">{{if .Holdout.Rows}}{{pct .Holdout.MAPE}}{{else}}—{{end}}</td></tr>
{{end}}</table>
{{end}}
{{with .Model}}
<table>
<tr><th>holdout MAPE</th><th>median APE</th><th>p90 APE</th><th>MAE</th><th>bias</th><th>linear part alone</th><th>quantile coverage</th><th>train samples</th><th>held-out samples</th><th>trained at</th><th>fit time</th></tr>
<tr><td class="num">{{pct .Holdout.MAPE}}</td><td class="num">{{pct .Holdout.MedianAPE}}</td><td class="num">{{pct .Holdout.P90APE}}</td><td class="num">{{ms .Holdout.MAE}}</td><td class="num">{{pct .Holdout.Bias}}</td><td class="num">{{pct .HoldoutLinear.MAPE}} MAPE</td><td class="num">{{with .HoldoutCoverage}}{{pct .Percent}} at q={{.Quantile}}{{else}}—{{end}}</td><td class="num">{{.TrainSamples}}</td><td class="num">{{.Holdout.Rows}}</td><td>{{utc .TrainedAt}}</td><td class="num">{{printf "%.2f s" .TrainSeconds}}</td></tr>
</table>
{{else}}{{if not .Transfer}}<p class="note">No model for this target yet.</p>{{end}}{{end}}
{{with .Status}}{{with .Rejected}}<p class="note bad">The publication gate refused a candidate at {{utc .At}}: {{.Reason}}{{if .Detail}} ({{.Detail}}){{end}}; {{if .Published}}it was published anyway (forced){{else}}the model in service stayed{{end}}.</p>{{end}}{{if .GateRejections}}<p class="note">Candidates refused by the publication gate so far: {{.GateRejections}}.</p>{{end}}{{if .LastError}}<p class="note bad">Last training error ({{utc .LastErrorAt}}): {{.LastError}}</p>{{end}}{{if .LastSkipReason}}<p class="note">Waiting: {{.LastSkipReason}}.</p>{{end}}{{end}}
<div class="grid">
{{if .HasHoldout}}<div>{{with .Holdout}}{{if .SVG}}{{.SVG}}{{else}}<p class="note">Predicted vs measured: {{.Note}}</p>{{end}}{{end}}</div>{{end}}
{{if .HasFill}}<div>{{with .Fill}}{{if .SVG}}{{.SVG}}{{else}}<p class="note">Store fill: {{.Note}}</p>{{end}}{{end}}</div>{{end}}
{{if .PerPod}}<div>{{with .Coefficients}}{{if .SVG}}{{.SVG}}{{else}}<p class="note">Linear coefficients: {{.Note}}</p>{{end}}{{end}}</div>
<div>{{with .Gain}}{{if .SVG}}{{.SVG}}{{else}}<p class="note">Tree gain: {{.Note}}</p>{{end}}{{end}}</div>{{end}}
</div>
</section>
{{end}}
{{if eq .Role "trainer"}}
<section>
<h2>Over time</h2>
<div class="grid">
<div>{{with .MAPE}}{{if .SVG}}{{.SVG}}{{else}}<p class="note">MAPE over time: {{.Note}}</p>{{end}}{{end}}</div>
<div>{{with .Durations}}{{if .SVG}}{{.SVG}}{{else}}<p class="note">Training runs: {{.Note}}</p>{{end}}{{end}}</div>
</div>
</section>
<section>
<h2>Recent training runs</h2>
{{if .Recent}}<table>
<tr><th>started (UTC)</th><th>target</th><th>wall time</th><th>model</th><th>train samples</th><th>holdout MAPE</th><th>live MAPE before</th><th>error</th></tr>
{{range .Recent}}<tr{{if .Failed}} class="bad"{{end}}><td>{{.When}}</td><td>{{.Target}}</td><td class="num">{{.Duration}}</td><td>{{.Kind}}</td><td class="num">{{.Rows}}</td><td class="num">{{.HoldoutMAPE}}</td><td class="num">{{.LiveMAPE}}</td><td>{{.Error}}</td></tr>
{{end}}</table>{{else}}<p class="note">No training run yet.</p>{{end}}
</section>
{{end}}
</main>
<footer>This page refreshes every 30 s. The same figures as JSON: <code>GET /model/info</code>, <code>GET /status</code>; as Prometheus metrics: <code>GET /metrics</code>. Plots are drawn on the server; the page loads nothing else.</footer>
</body>
</html>
`))
