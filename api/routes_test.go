package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
	"github.com/headroomhq/headroom/wire"
)

type service struct {
	db       *store.DB
	trainer  *trainer.Trainer
	pred     *predictor.Predictor
	trainerH http.Handler
	predictH http.Handler
	tokens   Tokens
}

func newService(t *testing.T, tokens Tokens) *service {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "samples.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tr, err := trainer.New(trainer.Config{BundleDir: filepath.Join(dir, "bundles")}, db) // linear only: fast
	if err != nil {
		t.Fatal(err)
	}
	p, _ := predictor.New(predictor.Mean, 0.9)
	limits := Limits{MaxBodyBytes: 1 << 20}
	return &service{db: db, trainer: tr, pred: p, tokens: tokens,
		trainerH: NewTrainerHandler(tr, db, TrainerOptions{Limits: limits, Tokens: tokens}),
		predictH: NewPredictorHandler(p, PredictorOptions{Limits: limits, Tokens: tokens})}
}

func do(h http.Handler, method, path, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://localhost:8000"+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func entry(ttft, tpot float64, running int) string {
	return fmt.Sprintf(`{"kv_cache_percentage":0.1,"input_token_length":%d,"num_request_waiting":0,"num_request_running":%d,`+
		`"num_tokens_generated":0,"prefix_cache_score":0,"actual_ttft_ms":%g,"actual_tpot_ms":%g}`, 100+running*7, running, ttft, tpot)
}

func (s *service) ingestAndTrain(t *testing.T, n int) {
	t.Helper()
	var es []string
	for i := 0; i < n; i++ {
		es = append(es, entry(20+float64(i%30), 10+float64(i%30)/10, i%30))
	}
	if w := do(s.trainerH, "POST", "/add_training_data_bulk", `{"entries":[`+strings.Join(es, ",")+`]}`); w.Code != 202 {
		t.Fatalf("ingest: %d %s", w.Code, w.Body)
	}
	pub, err := s.trainer.Retrain(context.Background())
	if err != nil || pub == nil {
		t.Fatalf("retrain: %v %v", pub, err)
	}
	s.pred.Swap(pub, pub.Bundle.CreatedAt)
}

func decode(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", w.Body, err)
	}
	return m
}

func TestIngestKeepsValidEntriesOfABatch(t *testing.T) {
	s := newService(t, Tokens{})
	body := `{"entries":[` + entry(50, 0, 1) + `,` + strings.Replace(entry(50, 0, 2), `"actual_ttft_ms":50`, `"actual_ttft_ms":NaN`, 1) +
		`,` + entry(0, 12, 3) + `]}`
	w := do(s.trainerH, "POST", "/add_training_data_bulk", body)
	if w.Code != 202 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	m := decode(t, w)
	if m["message"] != "Accepted 2 training samples." {
		t.Errorf("message %q", m["message"])
	}
	rej, _ := m["rejected"].([]any)
	if len(rej) != 1 || rej[0].(map[string]any)["index"] != 1.0 || !strings.Contains(fmt.Sprint(rej[0]), "actual_ttft_ms") {
		t.Errorf("rejected %v; want entry 1 naming actual_ttft_ms", m["rejected"])
	}
	c := s.db.Counts()
	if c.Train(features.TTFT)+c.Holdout(features.TTFT) != 1 || c.Train(features.TPOT)+c.Holdout(features.TPOT) != 1 {
		t.Errorf("store holds %+v; want one TTFT and one TPOT sample", c)
	}
}

func TestIngestErrors(t *testing.T) {
	s := newService(t, Tokens{})
	bad := strings.Replace(entry(50, 0, 1), `"kv_cache_percentage":0.1`, `"kv_cache_percentage":1.5`, 1)
	tests := []struct {
		name, path, body, ctype string
		want                    int
	}{
		{"all entries bad", "/add_training_data_bulk", `{"entries":[` + bad + `]}`, "application/json", 422},
		{"not json", "/add_training_data_bulk", `{"entries":[`, "application/json", 422},
		{"entries missing", "/add_training_data_bulk", `{"samples":[]}`, "application/json", 422},
		{"form content type", "/samples", entry(50, 0, 1), "application/x-www-form-urlencoded", 415},
		{"body too large", "/samples", `[` + strings.Repeat(entry(50, 0, 1)+",", 10000) + entry(50, 0, 1) + `]`, "application/json", 413},
		{"empty list accepted", "/add_training_data_bulk", `{"entries":[]}`, "application/json", 202},
		{"one object on /samples", "/samples", entry(50, 0, 1), "", 202},
		{"bare array on /samples", "/samples", `[` + entry(51, 0, 1) + `]`, "application/json", 202}, // not the entry above: that would be a duplicate
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "http://localhost:8000"+tt.path, strings.NewReader(tt.body))
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			w := httptest.NewRecorder()
			s.trainerH.ServeHTTP(w, req)
			if w.Code != tt.want {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.want, w.Body)
			}
			if _, ok := decode(t, w)["detail"]; tt.want >= 400 && !ok {
				t.Errorf("error without detail: %s", w.Body)
			}
		})
	}
	if n := s.db.Counts().Train(features.TTFT) + s.db.Counts().Holdout(features.TTFT); n != 2 {
		t.Errorf("store holds %d TTFT samples, want the 2 from valid requests only", n)
	}
}

func TestPredictRoutes(t *testing.T) {
	s := newService(t, Tokens{})
	row := `{"kv_cache_percentage":0.1,"input_token_length":200,"num_request_waiting":0,"num_request_running":4,"num_tokens_generated":1,"prefix_cache_score":0}`
	if w := do(s.predictH, "POST", "/predict/bulk/strict", `{"requests":[`+row+`]}`); w.Code != 503 || decode(t, w)["detail"] != "Models not ready" {
		t.Fatalf("before a model: %d %s", w.Code, w.Body)
	}
	if w := do(s.predictH, "GET", "/readyz", ""); w.Code != 503 {
		t.Errorf("readyz before a model: %d", w.Code)
	}
	w := do(s.predictH, "POST", "/predict/bulk", `{"requests":[`+row+`,`+row+`]}`)
	if m := decode(t, w); w.Code != 200 || m["failed_predictions"] != 2.0 || len(m["errors"].([]any)) != 2 {
		t.Errorf("/predict/bulk before a model: %d %s", w.Code, w.Body)
	}

	s.ingestAndTrain(t, 300)
	w = do(s.predictH, "POST", "/predict/bulk/strict", `{"requests":[`+row+`,`+strings.Replace(row, `"num_request_running":4`, `"num_request_running":25,"prefill_tokens_in_flight":-3`, 1)+`]}`)
	if w.Code != 200 {
		t.Fatalf("strict: %d %s", w.Code, w.Body)
	}
	var resp struct {
		Predictions []struct {
			TTFT float64 `json:"ttft_ms"`
			TPOT float64 `json:"tpot_ms"`
		} `json:"predictions"`
		Total int `json:"total_requests"`
		OK    int `json:"successful_predictions"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || resp.Total != 2 || resp.OK != 2 || len(resp.Predictions) != 2 {
		t.Fatalf("strict answer %s: %v", w.Body, err)
	}
	if !(resp.Predictions[1].TTFT > resp.Predictions[0].TTFT) {
		t.Errorf("a busier endpoint (25 running) predicted no slower: %+v", resp.Predictions)
	}
	if w := do(s.predictH, "POST", "/predict", strings.Replace(row, `}`, `,"prefill_tokens_in_flight":-1}`, 1)); w.Code != 422 {
		t.Errorf("/predict with negative in-flight tokens: %d, want 422", w.Code)
	}
	if w := do(s.predictH, "POST", "/predict/bulk/strict", `{"requests":[]}`); w.Code != 422 {
		t.Errorf("empty strict request: %d, want 422", w.Code)
	}
	st := decode(t, do(s.predictH, "GET", "/status", ""))
	if st["is_ready"] != true || st["model_type"] != "xgboost" {
		t.Errorf("status %v", st)
	}
	// Both say which lineage the version in service counts in.
	info := decode(t, do(s.predictH, "GET", "/model/info", ""))
	if st["bundle_epoch"] != s.trainer.Epoch() || info["epoch"] != s.trainer.Epoch() || s.trainer.Epoch() == "" {
		t.Errorf("predictor: /status bundle_epoch %v, /model/info epoch %v; the trainer's is %q", st["bundle_epoch"], info["epoch"], s.trainer.Epoch())
	}
	for k, v := range st["models_exist"].(map[string]any) {
		if _, ok := v.(bool); !ok {
			t.Errorf("models_exist[%s] = %v is not a bool", k, v)
		}
	}
}

func TestNotFoundAndMethodNotAllowed(t *testing.T) {
	s := newService(t, Tokens{})
	for _, h := range []http.Handler{s.trainerH, s.predictH} {
		if w := do(h, "GET", "/nope", ""); w.Code != 404 || decode(t, w)["detail"] != "Not Found" {
			t.Errorf("unknown path: %d %s", w.Code, w.Body)
		}
		if w := do(h, "GET", "/predict/bulk/strict", ""); h == s.predictH && (w.Code != 405 || decode(t, w)["detail"] != "Method Not Allowed") {
			t.Errorf("wrong method: %d %s", w.Code, w.Body)
		}
	}
}

func TestBundleETag(t *testing.T) {
	s := newService(t, Tokens{})
	if w := do(s.trainerH, "GET", "/model/bundle", ""); w.Code != 404 {
		t.Fatalf("bundle before training: %d", w.Code)
	}
	s.ingestAndTrain(t, 100)
	w := do(s.trainerH, "GET", "/model/bundle", "")
	etag := w.Header().Get("ETag")
	if w.Code != 200 || etag == "" {
		t.Fatalf("bundle: %d etag %q", w.Code, etag)
	}
	if w := do(s.trainerH, "GET", "/model/bundle", "", "If-None-Match", etag); w.Code != 304 || w.Body.Len() != 0 {
		t.Errorf("conditional GET of an unchanged bundle: %d with %d bytes", w.Code, w.Body.Len())
	}
	info := decode(t, do(s.trainerH, "GET", "/model/info", ""))
	ttft := info["ttft"].(map[string]any)
	if info["version"] != 1.0 || ttft["holdout"].(map[string]any)["rows"] == nil || ttft["train_samples"] == 0.0 {
		t.Errorf("model info %v", info)
	}
	dl := decode(t, do(s.trainerH, "GET", "/model/download/info", ""))
	for k, v := range dl["model_status"].(map[string]any) {
		if _, ok := v.(bool); !ok {
			t.Errorf("model_status[%s] = %v is not a bool", k, v)
		}
	}
}

func TestTokens(t *testing.T) {
	s := newService(t, Tokens{Read: "r-token", Write: "w-token"})
	row := `{"requests":[{"kv_cache_percentage":0,"input_token_length":1,"num_request_waiting":0,"num_request_running":0,"num_tokens_generated":1,"prefix_cache_score":0}]}`
	tests := []struct {
		name   string
		h      http.Handler
		method string
		path   string
		body   string
		auth   string
		want   int
	}{
		{"health open", s.trainerH, "GET", "/healthz", "", "", 200},
		{"readiness open", s.trainerH, "GET", "/readyz", "", "", 200},
		{"ingest without token", s.trainerH, "POST", "/samples", entry(1, 0, 1), "", 401},
		{"ingest with read token", s.trainerH, "POST", "/samples", entry(1, 0, 1), "Bearer r-token", 401},
		{"ingest with write token", s.trainerH, "POST", "/samples", entry(1, 0, 1), "Bearer w-token", 202},
		{"predict without token", s.predictH, "POST", "/predict/bulk/strict", row, "", 401},
		{"predict with wrong token", s.predictH, "POST", "/predict/bulk/strict", row, "Bearer r-tokeN", 401},
		{"predict with read token", s.predictH, "POST", "/predict/bulk/strict", row, "Bearer r-token", 503},
		{"predict with write token", s.predictH, "POST", "/predict/bulk/strict", row, "Bearer w-token", 503},
		// RFC 9110 §11.1: the scheme is case-insensitive, and a credential
		// without one is not a bearer token.
		{"lower-case scheme", s.predictH, "POST", "/predict/bulk/strict", row, "bearer r-token", 503},
		{"upper-case scheme", s.predictH, "POST", "/predict/bulk/strict", row, "BEARER r-token", 503},
		{"bare token", s.predictH, "POST", "/predict/bulk/strict", row, "r-token", 401},
		{"bare write token", s.trainerH, "POST", "/samples", entry(1, 0, 1), "w-token", 401},
		{"another scheme", s.predictH, "POST", "/predict/bulk/strict", row, "Basic r-token", 401},
		{"scheme without a space", s.predictH, "POST", "/predict/bulk/strict", row, "Bearerr-token", 401},
		{"bundle with read token", s.trainerH, "GET", "/model/bundle", "", "Bearer r-token", 404},
		{"reload needs write", s.predictH, "POST", "/reload", "", "Bearer r-token", 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			if tt.auth != "" {
				hdr = []string{"Authorization", tt.auth}
			}
			if w := do(tt.h, tt.method, tt.path, tt.body, hdr...); w.Code != tt.want {
				t.Errorf("%s %s: %d, want %d: %s", tt.method, tt.path, w.Code, tt.want, w.Body)
			}
		})
	}
}

// pdEntry is a disaggregated request's sample: a transfer of tokens KV
// tokens over a same-rack (rack "r0") or cross-zone link at 40 or 3 GB/s.
func pdEntry(tokens int, crossZone bool) string {
	zone, bw := "a", 40e9
	if crossZone {
		zone, bw = "b", 3e9
	}
	ms := 0.05 + 1000*float64(tokens)*163840/bw
	return fmt.Sprintf(`{"kv_cache_percentage":0.1,"input_token_length":%d,"num_request_waiting":0,"num_request_running":1,`+
		`"num_tokens_generated":0,"prefix_cache_score":0,"actual_ttft_ms":%g,"actual_tpot_ms":0,"actual_kv_transfer_ms":%g,`+
		`"kv_transfer_tokens":%d,"kv_bytes_per_token":163840,"prefill_pod":"p-0","decode_pod":"d-1",`+
		`"prefill_topology":{"node":"n0","rack":"r0","zone":"a","region":"eu"},`+
		`"decode_topology":{"node":"n1","rack":"r0","zone":%q,"region":"eu"},"concurrent_transfers":1}`,
		tokens, 50+ms, ms, tokens, zone)
}

func TestKVTransferEndToEnd(t *testing.T) {
	s := newService(t, Tokens{})
	var es []string
	for i := range 60 {
		es = append(es, pdEntry(100+i*50, i%2 == 1))
	}
	// One bad entry among them: a transfer without where it went.
	bad := strings.Replace(pdEntry(500, false), `"decode_topology":{"node":"n1","rack":"r0","zone":"a","region":"eu"},`, "", 1)
	w := do(s.trainerH, "POST", "/samples", `{"entries":[`+strings.Join(es, ",")+","+bad+`]}`)
	if w.Code != 202 {
		t.Fatalf("ingest: %d %s", w.Code, w.Body)
	}
	m := decode(t, w)
	if rej := fmt.Sprint(m["rejected"]); !strings.Contains(rej, "entries[60].decode_topology: Field required") {
		t.Errorf("rejected %s, want entry 60's missing decode_topology", rej)
	}
	stored := m["stored"].(map[string]any)
	train, holdout := stored["Train"].([]any), stored["Holdout"].([]any)
	if len(train) != len(features.Targets) || train[2].(float64)+holdout[2].(float64) != 60 {
		t.Errorf("stored %v, want the 60 transfers in the third stream", stored)
	}

	pub, err := s.trainer.Retrain(context.Background())
	if err != nil || pub == nil || pub.Bundle.Transfer == nil {
		t.Fatalf("retrain: %+v, %v", pub, err)
	}
	s.pred.Swap(pub, pub.Bundle.CreatedAt)
	for name, h := range map[string]http.Handler{"trainer": s.trainerH, "predictor": s.predictH} {
		info := decode(t, do(h, "GET", "/model/info", ""))
		kv, _ := info["kv_transfer"].(map[string]any)
		if kv["ready"] != true || len(kv["classes"].([]any)) != 2 {
			t.Errorf("%s /model/info kv_transfer: %v", name, kv)
		}
		st := decode(t, do(h, "GET", "/status", ""))
		if kv, _ := st["kv_transfer"].(map[string]any); kv["ready"] != true || kv["classes"].(map[string]any)["cross-zone"] == nil {
			t.Errorf("%s /status kv_transfer: %v", name, st["kv_transfer"])
		}
	}
	st := decode(t, do(s.trainerH, "GET", "/status", ""))
	if tr := st["training"].(map[string]any)["kv_transfer"].(map[string]any); tr["runs"] != 1.0 {
		t.Errorf("trainer /status training.kv_transfer: %v", tr)
	}
}

// An entry without a timestamp, sent again (a client's retry, a loop
// resending one upload), is one sample: the second copy is acknowledged
// like the first and not stored again, though the trainer stamped each
// copy with another arrival time; across a restart of the store too, and
// the live figures see it once. An entry the client timestamped is an
// observation at that time: the same row at another time is another. Before,
// each copy was stamped and stored as a new observation, and 30 resends of
// 100 rows with TTFT x 20 moved the served model (issue 26).
func TestResentEntryWithoutTimestampCountsOnce(t *testing.T) {
	s := newService(t, Tokens{})
	s.ingestAndTrain(t, 300)
	path := s.db.Path()
	clock := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now := func() time.Time { clock = clock.Add(time.Minute); return clock }
	handler := func(db *store.DB) http.Handler {
		return NewTrainerHandler(s.trainer, db, TrainerOptions{Limits: Limits{MaxBodyBytes: 1 << 20}, Now: now})
	}
	h := handler(s.db)
	stored := func(db *store.DB) int {
		c := db.Counts()
		return c.Train(features.TTFT) + c.Holdout(features.TTFT)
	}
	observed := func() uint64 {
		if l := s.trainer.Status().Targets["ttft"].Live; l != nil && l.Model != nil {
			return l.Model.Observed
		}
		return 0
	}
	post := func(h http.Handler, body string, wantDuplicates int) {
		t.Helper()
		w := do(h, "POST", "/add_training_data_bulk", body)
		if w.Code != http.StatusAccepted {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		var a wire.IngestAnswer
		if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
			t.Fatal(err)
		}
		if a.Accepted != 1 || a.Message != "Accepted 1 training samples." || a.Stored.Duplicates != wantDuplicates {
			t.Fatalf("answer %s: want 1 accepted, %d duplicates", w.Body, wantDuplicates)
		}
	}
	base := stored(s.db)
	resent := `{"entries":[` + entry(777, 0, 9) + `]}`
	seen := observed()
	post(h, resent, 0)
	post(h, resent, 1)
	if n := stored(s.db) - base; n != 1 {
		t.Fatalf("the entry sent twice without a timestamp stored %d times, want once", n)
	}
	if n := observed() - seen; n != 1 {
		t.Errorf("the live figures saw the entry %d times, want once", n)
	}

	// What was acknowledged is durable and keeps its identity: the store
	// reopened holds it once, with the time it first arrived, and a copy
	// sent after the restart is still the same sample.
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(path, store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if n := stored(db) - base; n != 1 {
		t.Fatalf("after a restart %d copies stored, want 1", n)
	}
	first := time.Date(2026, 12, 1, 10, 1, 0, 0, time.UTC)
	if !holdsAt(t, db, 777, first) {
		t.Errorf("the stored copy is not the first arrival's (%s)", first)
	}
	h = handler(db)
	post(h, resent, 1)

	// The client's own timestamps: the same row observed at two times is
	// two samples, and each of them sent again is a duplicate.
	at := func(ts string) string {
		return `{"entries":[` + strings.Replace(entry(777, 0, 9), `}`, `,"timestamp":"`+ts+`"}`, 1) + `]}`
	}
	post(h, at("2026-12-01T09:00:00Z"), 0)
	post(h, at("2026-12-01T09:00:01Z"), 0)
	post(h, at("2026-12-01T09:00:01Z"), 1)
	if n := stored(db) - base; n != 3 {
		t.Errorf("%d samples of the row, want 3: one without a timestamp, two at their own times", n)
	}
}

// holdsAt reports whether db holds a TTFT sample of label ttft with
// timestamp at.
func holdsAt(t *testing.T, db *store.DB, ttft float64, at time.Time) bool {
	t.Helper()
	train, holdout, err := db.Snapshot(features.TTFT)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(train, holdout...) {
		if s.ActualTTFTMs == ttft && s.Timestamp.Equal(at) {
			return true
		}
	}
	return false
}
