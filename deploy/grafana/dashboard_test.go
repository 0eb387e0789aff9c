// Package grafana_test checks the Grafana dashboard against the metrics the
// code really registers, so a renamed metric cannot leave a panel silently
// empty.
package grafana_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

type target struct {
	Name string `json:"name"` // annotations only
	Expr string `json:"expr"`
}

type panel struct {
	ID      int      `json:"id"`
	Type    string   `json:"type"`
	Title   string   `json:"title"`
	Targets []target `json:"targets"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
}

type dashboard struct {
	UID         string  `json:"uid"`
	Title       string  `json:"title"`
	Panels      []panel `json:"panels"`
	Annotations struct {
		List []target `json:"list"`
	} `json:"annotations"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

func load(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile("headroom.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("headroom.json: %v", err)
	}
	return d
}

// expressions returns every PromQL expression of the dashboard, with where
// it is.
func expressions(d dashboard) map[string]string {
	out := map[string]string{}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			out[p.Title+"#"+string(rune('A'+i))] = tg.Expr
		}
	}
	for _, a := range d.Annotations.List {
		if a.Expr != "" {
			out["annotation "+a.Name] = a.Expr
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				out["variable "+v.Name] = s
			}
		}
	}
	return out
}

var (
	// Name: "headroom_..." in *Opts, and prometheus.NewDesc("headroom_...".
	registeredName = regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(headroom_[a-z0-9_]+)"`)
	histogramName  = regexp.MustCompile(`(?s)HistogramOpts\{[^}]*?Name:\s*"(headroom_[a-z0-9_]+)"`)
	metricInExpr   = regexp.MustCompile(`\bheadroom_[a-zA-Z0-9_]+`)
)

// registered scans the repository's Go code (tests excluded) for the
// metric names it registers, and which of them are histograms.
func registered(t *testing.T) (names, histograms map[string]bool) {
	t.Helper()
	names, histograms = map[string]bool{}, map[string]bool{}
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range registeredName.FindAllSubmatch(src, -1) {
			names[string(m[1])] = true
		}
		for _, m := range histogramName.FindAllSubmatch(src, -1) {
			histograms[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 20 || len(histograms) < 2 {
		t.Fatalf("found %d metric names and %d histograms in the code; the scan is broken", len(names), len(histograms))
	}
	return names, histograms
}

func TestEveryMetricInTheDashboardIsRegistered(t *testing.T) {
	names, histograms := registered(t)
	d := load(t)
	for where, expr := range expressions(d) {
		used := metricInExpr.FindAllString(expr, -1)
		if len(used) == 0 {
			t.Errorf("%s: no headroom metric in %q", where, expr)
		}
		for _, m := range used {
			if names[m] {
				continue
			}
			base := m
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, suffix)
			}
			if base != m && histograms[base] {
				continue
			}
			t.Errorf("%s: %s is not registered by the code (expression %q)", where, m, expr)
		}
	}
}

// TestDashboardCoversTheService: the questions an operator asks each have a
// panel, over the metric that answers them.
func TestDashboardCoversTheService(t *testing.T) {
	d := load(t)
	all := ""
	for _, e := range expressions(d) {
		all += e + "\n"
	}
	for _, want := range []string{
		`headroom_http_request_duration_seconds_bucket{job=~"$job",server="predictor"`, // prediction latency
		`headroom_http_requests_total{job=~"$job",server="predictor"`,                  // prediction rate
		"headroom_holdout_mape_percent", "headroom_live_mape_percent",
		"headroom_bundle_version", "headroom_predictor_bundle_version",
		"headroom_bundle_age_seconds", "headroom_predictor_bundle_age_seconds",
		"headroom_samples_ingested_total", "headroom_samples_rejected_total", "headroom_ingest_shed_total",
		"headroom_training_duration_seconds_bucket", `result="failed"`, "headroom_bundle_publish_failures_total",
		"headroom_store_bucket_samples", "headroom_publication_rejections_total",
		"headroom_predictor_bundle_epoch_changes_total",
		"headroom_kv_transfer_holdout_mape_percent", "headroom_kv_transfer_bandwidth_bytes_per_second",
		// issue 26: the judgment of a rise of the live error, and the
		// bounds on what clients may hold or make the servers do
		`headroom_live_shift{job=~"$job",judgment="burst"}`, `headroom_live_shift{job=~"$job",judgment="drift"}`,
		"headroom_predict_shed_total", "headroom_bundle_watchers_refused_total", "headroom_bundle_watchers{",
		"headroom_connections_evicted_total", "headroom_connections_open",
		// the trainer's self-tuning and calibration
		"headroom_candidate_mape_percent", "headroom_quantile_served_level",
		// llm-d's EPP with Headroom's plugins (llmd/plugins): its own job
		"headroom_epp_decisions_total", "headroom_epp_pairs_call_seconds_bucket", "headroom_epp_decision_seconds_bucket",
		"headroom_epp_training_entries_total",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no panel queries %s", want)
		}
	}
}

func TestDashboardLayout(t *testing.T) {
	d := load(t)
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard needs a uid and a title")
	}
	var ids []int
	for _, p := range d.Panels {
		if slices.Contains(ids, p.ID) {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids = append(ids, p.ID)
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos x=%d w=%d outside Grafana's 24 columns", p.Title, p.GridPos.X, p.GridPos.W)
		}
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
	}
}
