package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// predictBody is a 10-row /predict/bulk/strict request.
var predictBody = func() []byte {
	rows := make([]string, 10)
	for i := range rows {
		rows[i] = fmt.Sprintf(`{"kv_cache_percentage":%v,"input_token_length":%d,"num_request_waiting":%d,`+
			`"num_request_running":%d,"num_tokens_generated":1,"prefix_cache_score":0.25,"prefill_tokens_in_flight":%d}`,
			float64(i)/10, 100+i*150, i%3, i, i*400)
	}
	return []byte(`{"requests":[` + strings.Join(rows, ",") + `]}`)
}()

// predictionStats are the client-side outcomes of prediction requests.
type predictionStats struct {
	mu        sync.Mutex
	latencies []time.Duration
	failures  []string
}

// predictOnce sends predictBody and records the outcome: anything but 200
// with every row predicted is a failure.
func (s *predictionStats) predictOnce(client *http.Client, url string) {
	start := time.Now()
	status, body, err := httpDo(context.Background(), client, "POST", url+"/predict/bulk/strict", predictBody)
	took := time.Since(start)
	var resp struct {
		Successful int `json:"successful_predictions"`
		Failed     int `json:"failed_predictions"`
	}
	if err == nil && status == 200 {
		err = json.Unmarshal(body, &resp)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latencies = append(s.latencies, took)
	switch {
	case err != nil:
		s.failures = append(s.failures, err.Error())
	case status != 200 || resp.Successful != 10 || resp.Failed != 0:
		s.failures = append(s.failures, fmt.Sprintf("status %d: %.200s", status, body))
	}
}

// run predicts back to back for d.
func (s *predictionStats) run(url string, d time.Duration) {
	client := &http.Client{Timeout: 5 * time.Second}
	for end := time.Now().Add(d); time.Now().Before(end); {
		s.predictOnce(client, url)
	}
}

func (s *predictionStats) summary() (n int, p50, p99, max time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := slices.Clone(s.latencies)
	if len(l) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(l)
	return len(l), l[len(l)/2], l[len(l)*99/100], l[len(l)-1]
}

// predictorStatus is the part of the predictor's /status the tests read.
type predictorStatus struct {
	Ready      bool    `json:"is_ready"`
	Generation uint64  `json:"model_generation"`
	AgeSeconds float64 `json:"bundle_age_seconds"`
	Checksum   string  `json:"bundle_checksum"`
	Epoch      string  `json:"bundle_epoch"`
}

// TestPredictorSurvivesTrainerOutage runs a trainer and a predictor as
// processes, then takes the trainer away in three ways: killed (connection
// refused), hanging (connections accepted, never answered: each sync waits
// out its client timeout), and serving a bundle that fails its checksum.
// Through all of them the predictor answers every prediction from its last
// bundle, stays ready, shows the bundle's age growing, and counts the
// failed and refused syncs. A prediction slower than 3 s would mean the
// serving path waits on the sync path (whose client gives up after 10 s);
// the latencies per phase are logged.
func TestPredictorSurvivesTrainerOutage(t *testing.T) {
	trainerAddr, predictorAddr := freeAddr(t), freeAddr(t)
	trainerURL, predictorURL := "http://"+trainerAddr, "http://"+predictorAddr
	tr := startProc(t, nil, "trainer", "--data-dir", t.TempDir(), "--trainer-listen", trainerAddr,
		"--no-xgboost", "--retrain-interval", "200ms", "--log-level", "warn")
	tr.waitHealthy(trainerURL, 20*time.Second)
	l := newLedger()
	mustIngest(t, l, trainerURL, 300)
	waitFor(t, "a bundle", 10*time.Second, func() bool { return bundleVersion(trainerURL) >= 1 })
	_, goodBundle, err := httpDo(context.Background(), http.DefaultClient, "GET", trainerURL+"/model/bundle", nil)
	if err != nil {
		t.Fatal(err)
	}

	pr := startProc(t, nil, "predictor", "--data-dir", t.TempDir(), "--predictor-listen", predictorAddr,
		"--trainer-url", trainerURL, "--sync-interval", "100ms", "--log-level", "error")
	pr.waitHealthy(predictorURL, 20*time.Second)
	var st predictorStatus
	waitFor(t, "the predictor to load the bundle", 10*time.Second, func() bool {
		_, err := getJSON(predictorURL+"/status", &st)
		return err == nil && st.Ready
	})
	served := st.Checksum

	type phase struct {
		name  string
		stats predictionStats
	}
	var phases []*phase
	measure := func(name string, d time.Duration) {
		t.Helper()
		ph := &phase{name: name}
		phases = append(phases, ph)
		var before, after predictorStatus
		getJSON(predictorURL+"/status", &before)
		ph.stats.run(predictorURL, d)
		if code, _ := getJSON(predictorURL+"/readyz", nil); code != 200 {
			t.Errorf("%s: /readyz %d", name, code)
		}
		getJSON(predictorURL+"/status", &after)
		if after.Checksum != served || !after.Ready {
			t.Errorf("%s: predictor serves %q (ready %v), want the last good bundle %q", name, after.Checksum, after.Ready, served)
		}
		if grew := after.AgeSeconds - before.AgeSeconds; grew < d.Seconds()*0.9 {
			t.Errorf("%s: bundle age went from %.2fs to %.2fs over %v", name, before.AgeSeconds, after.AgeSeconds, d)
		}
		ph.stats.mu.Lock()
		if len(ph.stats.failures) > 0 {
			t.Errorf("%s: %d failed predictions, first: %s", name, len(ph.stats.failures), ph.stats.failures[0])
		}
		ph.stats.mu.Unlock()
	}
	syncs := func(result string) float64 {
		return metricValue(predictorURL, `headroom_predictor_bundle_syncs_total{result="`+result+`"}`)
	}

	measure("trainer up", 500*time.Millisecond)

	tr.kill()
	measure("trainer killed", time.Second)
	if n := syncs("unreachable"); n < 1 {
		t.Errorf("syncs counted unreachable: %v, want some", n)
	}

	// A trainer that accepts connections and never answers.
	ln, err := net.Listen("tcp", trainerAddr)
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var heldMu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			heldMu.Lock()
			held = append(held, c)
			heldMu.Unlock()
		}
	}()
	measure("trainer hangs", time.Second)
	if longTests() {
		// The sync client gives up on a trainer that never answers (10 s),
		// and the server drops a client that never finishes its headers
		// (ReadHeaderTimeout, 10 s): timeouts on both sides.
		unreachable := syncs("unreachable")
		slow, err := net.Dial("tcp", predictorAddr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(slow, "POST /predict/bulk/strict HTTP/1.1\r\nHost: x\r\n")
		measure("trainer hangs, long", 11*time.Second)
		if syncs("unreachable") <= unreachable {
			t.Error("the sync client did not time out on a trainer that never answers")
		}
		slow.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.ReadAll(slow); err != nil { // nil: closed by the server
			t.Errorf("the server still holds a connection whose headers never came: %v", err)
		}
		slow.Close()
	}
	heldMu.Lock()
	hung := len(held)
	heldMu.Unlock()
	if hung == 0 {
		t.Error("the predictor never tried the hanging trainer")
	}
	ln.Close()
	heldMu.Lock()
	for _, c := range held {
		c.Close()
	}
	heldMu.Unlock()

	// A trainer whose bundle fails its checksum.
	bad := []byte(strings.Replace(string(goodBundle), `"min_ms":`, `"min_ms":1`, 1))
	if string(bad) == string(goodBundle) {
		t.Fatal("test bug: nothing to tamper with")
	}
	refusedBefore := syncs("refused")
	fake := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"tampered"`)
		w.Write(bad)
	})}
	ln, err = net.Listen("tcp", trainerAddr)
	if err != nil {
		t.Fatal(err)
	}
	go fake.Serve(ln)
	defer fake.Close()
	waitFor(t, "a refused sync", 5*time.Second, func() bool { return syncs("refused") > refusedBefore })
	measure("trainer serves a corrupt bundle", 500*time.Millisecond)

	for _, ph := range phases {
		n, p50, p99, max := ph.stats.summary()
		t.Logf("%-32s %5d predictions, 0 failed; latency p50 %v, p99 %v, max %v", ph.name, n,
			p50.Round(time.Microsecond), p99.Round(time.Microsecond), max.Round(time.Microsecond))
		if max > 3*time.Second {
			t.Errorf("%s: a prediction took %v: the serving path waited on the sync path", ph.name, max)
		}
	}
	t.Logf("syncs: unreachable %v, refused %v; %d connections to the hanging trainer", syncs("unreachable"), syncs("refused"), hung)
}

// TestPredictorFollowsAWipedTrainer: a trainer's data directory is lost and
// a trainer starts empty on the same address. Its bundles start again at
// version 1, under a new epoch, and a predictor that served version 2 or
// more of the old lineage serves the new one as soon as it is published,
// through the long poll it holds (its periodic poll is an hour away), and
// counts the lineage change. Before epochs it served the old bundle until
// it was restarted.
func TestPredictorFollowsAWipedTrainer(t *testing.T) {
	trainerAddr, predictorAddr := freeAddr(t), freeAddr(t)
	trainerURL, predictorURL := "http://"+trainerAddr, "http://"+predictorAddr
	startTrainer := func() *proc {
		tr := startProc(t, nil, "trainer", "--data-dir", t.TempDir(), "--trainer-listen", trainerAddr,
			"--no-xgboost", "--retrain-interval", "200ms", "--log-level", "warn")
		tr.waitHealthy(trainerURL, 20*time.Second)
		return tr
	}
	trainerEpoch := func() string {
		var st struct {
			Epoch string `json:"bundle_epoch"`
		}
		waitFor(t, "the trainer's /status", 10*time.Second, func() bool {
			_, err := getJSON(trainerURL+"/status", &st)
			return err == nil
		})
		return st.Epoch
	}
	old := startTrainer()
	oldEpoch := trainerEpoch()
	l := newLedger()
	mustIngest(t, l, trainerURL, 300)
	waitFor(t, "the first bundle", 20*time.Second, func() bool { return bundleVersion(trainerURL) >= 1 })
	mustIngest(t, l, trainerURL, 300)
	waitFor(t, "a second bundle", 20*time.Second, func() bool { return bundleVersion(trainerURL) >= 2 })

	pr := startProc(t, nil, "predictor", "--data-dir", t.TempDir(), "--predictor-listen", predictorAddr,
		"--trainer-url", trainerURL, "--sync-interval", "1h", "--log-level", "warn")
	pr.waitHealthy(predictorURL, 20*time.Second)
	var st predictorStatus
	waitFor(t, "the predictor to serve the old lineage", 20*time.Second, func() bool {
		_, err := getJSON(predictorURL+"/status", &st)
		return err == nil && st.Ready && st.Epoch == oldEpoch && st.Generation >= 2
	})

	old.kill()
	wiped := startTrainer()
	newEpoch := trainerEpoch()
	if newEpoch == "" || newEpoch == oldEpoch {
		t.Fatalf("a trainer on an empty data directory has epoch %q; the old one had %q", newEpoch, oldEpoch)
	}
	mustIngest(t, l, trainerURL, 300)
	waitFor(t, "the new lineage's first bundle", 20*time.Second, func() bool { return bundleVersion(trainerURL) >= 1 })
	waitFor(t, "the predictor to serve the new lineage", 20*time.Second, func() bool {
		_, err := getJSON(predictorURL+"/status", &st)
		return err == nil && st.Epoch == newEpoch
	})
	if st.Generation >= 2 && bundleVersion(trainerURL) < st.Generation {
		t.Errorf("serving version %d of the new lineage; the trainer has %d", st.Generation, bundleVersion(trainerURL))
	}
	if n := metricValue(predictorURL, "headroom_predictor_bundle_epoch_changes_total"); n != 1 {
		t.Errorf("headroom_predictor_bundle_epoch_changes_total %v, want 1", n)
	}
	var info struct {
		Epoch string `json:"epoch"`
	}
	if _, err := getJSON(predictorURL+"/model/info", &info); err != nil || info.Epoch != newEpoch {
		t.Errorf("predictor /model/info epoch %q (%v), want %q", info.Epoch, err, newEpoch)
	}
	wiped.stop(20 * time.Second)
	pr.stop(20 * time.Second)
}
