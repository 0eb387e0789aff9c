package plugins_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"

	"github.com/headroomhq/headroom/llmd/inproc"
	"github.com/headroomhq/headroom/llmd/plugins"
)

// inProcess is config (the shipped config, or one made from it) with the
// producer ranking in the EPP's process, and extra parameters after it.
func inProcess(t testing.TB, config []byte, extra ...string) []byte {
	t.Helper()
	c := string(config)
	const at = "    nonCachedTokens: 16\n    timeout: "
	if !strings.Contains(c, at) {
		t.Fatal("the shipped config's producer parameters changed: update inProcess")
	}
	return []byte(strings.Replace(c, at, "    rankInProcess: true\n"+strings.Join(extra, "")+at, 1))
}

// writeKey writes a signing key to a file of its own and returns its path.
func writeKey(t testing.TB, key string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "signing-key")
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitUntilScored schedules probe requests on r until its producer scores
// one (it holds a bundle that ranks pairs), for at most 30 s.
func waitUntilScored(t testing.TB, r *inproc.Router, reg prometheus.Gatherer, eps []fwksched.Endpoint) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; counter(t, reg, "headroom_epp_decisions_total", "outcome", "scored") == 0; n++ {
		if time.Now().After(deadline) {
			t.Fatalf("the in-process ranker scored nothing in 30 s (no_model %v)", counter(t, reg, "headroom_epp_decisions_total", "outcome", "no_model"))
		}
		if _, err := r.Schedule(context.Background(), request(fmt.Sprintf("probe-%d", n), 500, uint32(900+n), nil), eps); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestInProcessRankerPicksAsThePredictor: with rankInProcess the EPP
// follows the trainer's signed bundles itself and its picks are the
// predictor's on the same bundle, request for request, with and without
// SLOs; a producer holding another key refuses every bundle and falls back
// as one without a model does.
func TestInProcessRankerPicksAsThePredictor(t *testing.T) {
	const key = "in-process-ranker-test-signing-key"
	keyFile := writeKey(t, key)
	h := startHeadroomWith(t, false, "--signing-key-file", keyFile)

	httpReg, localReg, wrongReg := prometheus.NewRegistry(), prometheus.NewRegistry(), prometheus.NewRegistry()
	overHTTP := newRouterWith(t, shipped(t), h.predictor, "", httpReg)
	wrong := newRouterWith(t, inProcess(t, shipped(t), "    signingKeyFile: "+writeKey(t, "some-other-key-of-enough-length")+"\n"), "", h.trainer, wrongReg)
	local := newRouterWith(t, inProcess(t, shipped(t), "    signingKeyFile: "+keyFile+"\n", "    syncInterval: 200ms\n"), "", h.trainer, localReg)
	h.train(t, trainingSamples(300, 7))
	waitUntilScored(t, local, localReg, endpoints(realFleet))

	ctx := context.Background()
	scored := counter(t, localReg, "headroom_epp_decisions_total", "outcome", "scored")
	// realFleet, and the same pods with their loads moved round, all
	// within the synthetic pool's ranges: every decision is scored.
	moved := make([]pod, len(realFleet))
	for i, p := range realFleet {
		q := realFleet[(i+1)%len(realFleet)]
		p.waiting, p.running = q.waiting+i%2, (q.running+5)%16
		moved[i] = p
	}
	fleets := map[string][]pod{"realFleet": realFleet, "moved": moved}
	cases := 0
	for fleetName, fleet := range fleets {
		for n, tt := range []struct {
			tokens  int
			headers map[string]string
		}{
			{3000, nil}, {600, nil}, {40, nil}, {1800, map[string]string{"x-llm-d-slo-ttft-ms": "300"}},
			{900, map[string]string{"x-llm-d-slo-ttft-ms": "250", "x-llm-d-slo-tpot-ms": "25"}},
		} {
			id, seed := fmt.Sprintf("%s-%d", fleetName, n), uint32(100+10*n+len(fleetName))
			want, err := overHTTP.Schedule(ctx, request(id, tt.tokens, seed, tt.headers), endpoints(fleet))
			if err != nil {
				t.Fatal(err)
			}
			got, err := local.Schedule(ctx, request(id, tt.tokens, seed, tt.headers), endpoints(fleet))
			if err != nil {
				t.Fatal(err)
			}
			wd, wp := picks(t, want)
			gd, gp := picks(t, got)
			if gd != wd || gp != wp {
				t.Errorf("%s, %d tokens, SLOs %v: in process picked (%q, %s), the predictor's ranking (%q, %s)", fleetName, tt.tokens, tt.headers, gp, gd, wp, wd)
			}
			cases++
		}
	}
	if got := counter(t, localReg, "headroom_epp_decisions_total", "outcome", "scored") - scored; got != float64(cases) {
		t.Errorf("%v of %d in-process decisions scored", got, cases)
	}
	if got := counter(t, httpReg, "headroom_epp_decisions_total", "outcome", "scored"); got != float64(cases) {
		t.Errorf("%v of %d decisions over HTTP scored", got, cases)
	}

	// The producer with the wrong key has polled the same trainer all along.
	if _, err := wrong.Schedule(ctx, request("wrong", 800, 77, nil), endpoints(realFleet)); err != nil {
		t.Fatal(err)
	}
	if s, nm := counter(t, wrongReg, "headroom_epp_decisions_total", "outcome", "scored"), counter(t, wrongReg, "headroom_epp_decisions_total", "outcome", "no_model"); s != 0 || nm != 1 {
		t.Errorf("a producer with another signing key: %v decisions scored, %v without a model; want 0 and 1", s, nm)
	}

	// Each producer's syncs show in the EPP's series as a predictor's: the
	// bundle in service, and the refusals.
	const plugin = "plugin"
	if v := gauge(t, localReg, "headroom_predictor_bundle_version", plugin, plugins.ProducerType); v < 1 {
		t.Errorf("in process: bundle version %v in the series, want the trainer's (1 or more)", v)
	}
	if v := gauge(t, wrongReg, "headroom_predictor_bundle_version", plugin, plugins.ProducerType); v != 0 {
		t.Errorf("another signing key: bundle version %v in the series, want none (0)", v)
	}
	if n := counter(t, wrongReg, "headroom_predictor_bundle_syncs_total", "result", "refused"); n < 1 {
		t.Errorf("another signing key: %v syncs counted refused, want 1 or more", n)
	}
}
