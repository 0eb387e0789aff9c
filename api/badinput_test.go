package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
	"github.com/headroomhq/headroom/wire"
)

// The list of bad input, over HTTP, on the routes that take bodies:
// each case answers 4xx with a detail that names the field and the row (or,
// for a body that is not JSON at all, the byte offset), and the store keeps
// exactly the valid entries sent beside the bad ones. wire.Decoder-level tables
// (every field × every bad value, in every body form) are in wire/decode_test.go;
// this is the end-to-end check that nothing of a bad row reaches the store.

// goodEntry is a valid training entry whose id (input_token_length) marks
// it in the store.
func goodEntry(id int) string {
	return fmt.Sprintf(`{"kv_cache_percentage":0.2,"input_token_length":%d,"num_request_waiting":1,"num_request_running":3,`+
		`"num_tokens_generated":0,"prefix_cache_score":0.5,"actual_ttft_ms":42,"actual_tpot_ms":0}`, id)
}

// badEntry is goodEntry with one field's raw JSON replaced (or removed when
// lit is empty, or appended when absent).
func badEntry(id int, field, lit string) string {
	e := goodEntry(id)
	key := `"` + field + `":`
	start := strings.Index(e, key)
	if start < 0 {
		return strings.TrimSuffix(e, "}") + "," + key + lit + "}"
	}
	end := start + len(key)
	for depth := 0; end < len(e); end++ {
		c := e[end]
		if depth == 0 && (c == ',' || c == '}') {
			break
		}
		switch c {
		case '[', '{':
			depth++
		case ']', '}':
			depth--
		}
	}
	if lit == "" {
		if e[start-1] == ',' {
			start--
		} else if e[end] == ',' {
			end++
		}
		return e[:start] + e[end:]
	}
	return e[:start] + key + lit + e[end:]
}

// badRowCases are entries refused one by one: field, raw value, and a word
// the detail must contain.
var badRowCases = []struct {
	name, field, lit, want string
}{
	{"wrong type: string for a count", "num_request_running", `"three"`, "integer"},
	{"wrong type: object for a fraction", "kv_cache_percentage", `{"v":0.2}`, "number"},
	{"wrong type: bool for a latency", "actual_ttft_ms", `true`, "number"},
	{"missing required field", "actual_ttft_ms", ``, "required"},
	{"missing count", "num_tokens_generated", ``, "required"},
	{"null required", "input_token_length", `null`, "integer"},
	{"negative count", "num_request_waiting", `-1`, "greater than or equal"},
	{"negative latency", "actual_tpot_ms", `-0.5`, "greater than or equal"},
	{"fraction above 1", "kv_cache_percentage", `1.5`, "less than or equal"},
	{"fraction below 0", "prefix_cache_score", `-0.01`, "greater than or equal"},
	{"fractional count", "input_token_length", `12.5`, "fractional"},
	{"NaN", "actual_ttft_ms", `NaN`, "finite"},
	{"Infinity", "actual_ttft_ms", `Infinity`, "finite"},
	{"-Infinity", "kv_cache_percentage", `-Infinity`, "finite"},
	{"lower-case inf", "actual_tpot_ms", `inf`, "finite"},
	{"Inf", "actual_ttft_ms", `Inf`, "finite"},
	{"lower-case nan", "prefix_cache_score", `nan`, "finite"},
	{"+Infinity", "actual_ttft_ms", `+Infinity`, "finite"},
	{"quoted NaN", "actual_ttft_ms", `"NaN"`, "finite"},
	{"quoted Infinity", "prefix_cache_score", `"Infinity"`, "finite"},
	{"quoted -inf", "actual_ttft_ms", `"-inf"`, "finite"},
	{"overflowing literal", "actual_ttft_ms", `1e400`, "finite"},
	{"overflowing negative literal", "kv_cache_percentage", `-1e400`, "finite"},
	{"quoted overflowing literal", "actual_tpot_ms", `"1e400"`, "finite"},
	{"absurd TTFT 10^12 ms", "actual_ttft_ms", `1e12`, "less than or equal"},
	{"absurd tokens 10^9", "input_token_length", `1000000000`, "less than or equal"},
	{"absurd in-flight tokens", "prefill_tokens_in_flight", `1e15`, "less than or equal"},
	{"count beyond int64", "num_request_running", `9223372036854775808`, "less than or equal"},
	{"deep nesting in a field", "kv_cache_percentage", strings.Repeat("[", 200) + strings.Repeat("]", 200), ""},
	{"duplicate key", "input_token_length", `7,"input_token_length":8`, "more than once"},
	{"bad timestamp", "timestamp", `"yesterday"`, "datetime"},
	// Issue 11 row 1: each of these made the whole batch a 500.
	{"timestamp in year 9999", "timestamp", `"9999-12-31T23:59:59Z"`, "range samples are stored in"},
	{"timestamp in year 1500", "timestamp", `"1500-06-01T00:00:00Z"`, "range samples are stored in"},
	{"timestamp in year 1", "timestamp", `"0001-01-01T00:00:00Z"`, "range samples are stored in"},
	{"timestamp a day past 2262-04-11", "timestamp", `"2262-04-12T00:00:00Z"`, "range samples are stored in"},
	{"timestamp before 1677-09-21 00:12", "timestamp", `"1677-09-21T00:00:00Z"`, "range samples are stored in"},
	{"timestamp pushed past the range by its offset", "timestamp", `"2262-04-11T23:59:59-01:00"`, "range samples are stored in"},
	// Issue 11 row 7: a 10 MB pod_type was stored.
	{"pod_type of 10 MB", "pod_type", `"` + strings.Repeat("x", 10<<20) + `"`, "at most 64 characters"},
	{"pod_type of 65 characters", "pod_type", `"` + strings.Repeat("é", 65) + `"`, "at most 64 characters"},
}

func newBadInputService(t *testing.T, limits Limits) (*store.DB, http.Handler, http.Handler) {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "samples.db"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tr, err := trainer.New(trainer.Config{}, db)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := predictor.New(predictor.Mean, 0.9)
	return db, NewTrainerHandler(tr, db, TrainerOptions{Limits: limits}), NewPredictorHandler(p, PredictorOptions{Limits: limits})
}

// storedIDs lists the ids (input_token_length) of every stored TTFT sample.
func storedIDs(t *testing.T, db *store.DB) map[int64]bool {
	t.Helper()
	train, holdout, err := db.Snapshot(features.TTFT)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int64]bool{}
	for _, s := range append(train, holdout...) {
		ids[s.Row.InputTokenLength] = true
	}
	return ids
}

type ingestReply struct {
	Accepted int               `json:"accepted"`
	Detail   []wire.FieldError `json:"detail"`
	Rejected []wire.Rejection  `json:"rejected"`
}

// TestBadRowsOverHTTP sends each bad row twice: between two good entries
// (202; the good ones stored, the bad one reported by index naming its
// field) and alone (422 naming entries[0] and the field). Nothing of a bad
// row may be stored.
func TestBadRowsOverHTTP(t *testing.T) {
	db, h, _ := newBadInputService(t, Limits{})
	want := map[int64]bool{}
	next := 1000
	for _, c := range badRowCases {
		t.Run(c.name, func(t *testing.T) {
			good1, bad, good2 := next, next+1, next+2
			next += 3
			body := `{"entries":[` + goodEntry(good1) + "," + badEntry(bad, c.field, c.lit) + "," + goodEntry(good2) + `]}`
			w := do(h, "POST", "/add_training_data_bulk", body)
			var r ingestReply
			if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil {
				t.Fatalf("%d %s: %v", w.Code, w.Body, err)
			}
			// Deep nesting and a bare inf are not JSON: the whole body is
			// refused, naming the offset; everything else is one bad row.
			if w.Code == http.StatusUnprocessableEntity && len(r.Detail) == 1 && r.Detail[0].Type == "json_invalid" {
				if c.want != "" {
					t.Fatalf("body refused as invalid JSON (%+v); want the row refused alone", r.Detail[0])
				}
				t.Logf("whole body refused: %s", r.Detail[0].Ctx["error"])
				if len(r.Detail[0].Loc) != 2 {
					t.Errorf("json_invalid without a byte offset: %+v", r.Detail[0])
				}
			} else {
				want[int64(good1)], want[int64(good2)] = true, true
				if w.Code != http.StatusAccepted || r.Accepted != 2 || len(r.Rejected) != 1 || r.Rejected[0].Index != 1 {
					t.Fatalf("%d %s; want 202 with entry 1 rejected", w.Code, w.Body)
				}
				d := r.Rejected[0].Detail
				if !strings.Contains(d, "entries[1]") || !strings.Contains(d, c.field) || !strings.Contains(strings.ToLower(d), c.want) {
					t.Errorf("rejection detail %q does not name entries[1], %s and %q", d, c.field, c.want)
				}
			}

			// The same row alone: 422, detail naming row and field.
			w = do(h, "POST", "/add_training_data_bulk", `{"entries":[`+badEntry(bad, c.field, c.lit)+`]}`)
			if w.Code != http.StatusUnprocessableEntity {
				t.Fatalf("bad row alone: %d %s; want 422", w.Code, w.Body)
			}
			if !strings.Contains(w.Body.String(), `"detail"`) {
				t.Errorf("422 without detail: %s", w.Body)
			}
			if c.want != "" && !strings.Contains(w.Body.String(), `["body","entries",0,"`+c.field+`"]`) {
				t.Errorf("422 detail does not locate entries[0].%s: %s", c.field, w.Body)
			}
		})
	}
	got := storedIDs(t, db)
	for id := range got {
		if !want[id] {
			t.Errorf("sample %d is stored but was never sent valid", id)
		}
	}
	for id := range want {
		if !got[id] {
			t.Errorf("valid sample %d sent beside a bad one is missing", id)
		}
	}
	t.Logf("%d bad rows tried, each beside good entries and alone; %d good entries stored, nothing else", len(badRowCases), len(got))
}

// TestBadRequestsOverHTTP covers what is wrong with a whole request: its
// JSON, its envelope, its size, its type, its length.
func TestBadRequestsOverHTTP(t *testing.T) {
	const maxBody, maxRows, maxEntries = 64 << 10, 50, 40
	db, th, ph := newBadInputService(t, Limits{MaxBodyBytes: maxBody, MaxRows: maxRows, MaxEntries: maxEntries})
	row := `{"kv_cache_percentage":0.1,"input_token_length":10,"num_request_waiting":0,"num_request_running":1,"num_tokens_generated":1,"prefix_cache_score":0}`
	rows := func(n int) string {
		return `{"requests":[` + strings.TrimSuffix(strings.Repeat(row+",", n), ",") + `]}`
	}
	entries := func(n, first int) string {
		es := make([]string, n)
		for i := range es {
			es[i] = goodEntry(first + i)
		}
		return `{"entries":[` + strings.Join(es, ",") + `]}`
	}
	deep := strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)
	tests := []struct {
		name   string
		h      http.Handler
		path   string
		ctype  string
		body   string
		status int
		detail string // substring of the response
	}{
		{"malformed JSON", th, "/add_training_data_bulk", "application/json", `{"entries":[` + goodEntry(1) + `,{]}`, 422, `"json_invalid"`},
		{"truncated body", th, "/samples", "application/json", `[` + goodEntry(2), 422, `"json_invalid"`},
		{"not an object", th, "/add_training_data_bulk", "application/json", `"entries"`, 422, `"body"`},
		{"entries not a list", th, "/add_training_data_bulk", "application/json", `{"entries":{"0":` + goodEntry(3) + `}}`, 422, `"entries"`},
		{"entries missing", th, "/add_training_data_bulk", "application/json", `{"samples":[` + goodEntry(4) + `]}`, 422, `"entries"`},
		{"duplicate entries key", th, "/add_training_data_bulk", "application/json", `{"entries":[],"entries":[` + goodEntry(5) + `]}`, 422, `duplicate`},
		{"deep nesting, envelope", th, "/add_training_data_bulk", "application/json", `{"x":` + deep + `,"entries":[]}`, 422, `depth`},
		{"deep nesting, prediction", ph, "/predict/bulk/strict", "application/json", `{"requests":[` + deep + `]}`, 422, `depth`},
		{"form content type", th, "/add_training_data_bulk", "application/x-www-form-urlencoded", entries(1, 6), 415, `Content-Type`},
		{"text content type", th, "/samples", "text/plain", goodEntry(7), 415, `application/json`},
		{"form content type, prediction", ph, "/predict/bulk/strict", "multipart/form-data; boundary=x", rows(1), 415, `Content-Type`},
		{"body over the size limit", th, "/add_training_data_bulk", "application/json", entries(400, 100), 413, fmt.Sprint(maxBody)},
		{"body over the size limit, prediction", ph, "/predict/bulk/strict", "application/json", rows(600), 413, fmt.Sprint(maxBody)},
		{"more entries than the limit", th, "/add_training_data_bulk", "application/json", entries(maxEntries+1, 500), 422, `"entries"`},
		{"more rows than the limit", ph, "/predict/bulk/strict", "application/json", rows(maxRows + 1), 422, `"requests"`},
		{"more rows than the limit, non-strict", ph, "/predict/bulk", "application/json", rows(maxRows + 1), 422, `"requests"`},
		{"empty prediction batch", ph, "/predict/bulk/strict", "application/json", `{"requests":[]}`, 422, `"requests"`},
		{"empty body", th, "/add_training_data_bulk", "application/json", ``, 422, `"missing"`},
		{"empty prediction body", ph, "/predict", "application/json", ``, 422, `"missing"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "http://localhost:8000"+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.ctype)
			w := httptest.NewRecorder()
			tt.h.ServeHTTP(w, req)
			if w.Code != tt.status || !strings.Contains(w.Body.String(), `"detail"`) || !strings.Contains(w.Body.String(), tt.detail) {
				t.Errorf("%d %.300s; want %d with a detail containing %s", w.Code, w.Body, tt.status, tt.detail)
			}
		})
	}
	// The limits themselves are accepted: exactly maxEntries entries, and
	// an empty ingest batch (202, as the reference: the router may flush
	// nothing).
	if w := do(th, "POST", "/add_training_data_bulk", entries(maxEntries, 2000)); w.Code != 202 {
		t.Errorf("exactly %d entries: %d %s", maxEntries, w.Code, w.Body)
	}
	if w := do(th, "POST", "/add_training_data_bulk", `{"entries":[]}`); w.Code != 202 {
		t.Errorf("empty ingest batch: %d %s", w.Code, w.Body)
	}
	if w := do(ph, "POST", "/predict/bulk/strict", rows(maxRows)); w.Code != 503 { // valid, but no model yet
		t.Errorf("exactly %d rows: %d %s", maxRows, w.Code, w.Body)
	}
	ids := storedIDs(t, db)
	if len(ids) != maxEntries {
		t.Errorf("store holds %d samples, want only the %d of the valid request", len(ids), maxEntries)
	}
	for id := range ids {
		if id < 2000 {
			t.Errorf("sample %d of a refused request is stored", id)
		}
	}
	t.Logf("%d bad requests tried; only the valid request's %d samples stored", len(tests), len(ids))
}
