package plugins_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"

	"github.com/headroomhq/headroom/llmd/eppgc"
	"github.com/headroomhq/headroom/llmd/inproc"
)

// benchFleet is 16 prefill and 16 decode pods over two zones of four racks
// of two nodes each, with a busy pool's loads.
func benchFleet() []pod {
	var out []pod
	for _, role := range []string{"prefill", "decode"} {
		for i := range 16 {
			out = append(out, pod{name: fmt.Sprintf("%s-%d", role, i), role: role,
				node: fmt.Sprintf("%s-n%d", role, i/2), rack: fmt.Sprintf("r%d", i/4), zone: fmt.Sprintf("z%d", i/8),
				waiting: i % 3, running: 2 + i%9, kv: float64(i%10) / 10})
		}
	}
	return out
}

// benchSamples are the synthetic pool's entries with the KV-cache usage
// spread over benchFleet's (its TTFT and TPOT do not depend on it): no
// candidate of the benchmark lies outside the models' training ranges, so
// every decision is scored rather than falling back as extrapolated.
func benchSamples() []sample {
	s := trainingSamples(400, 3)
	for i, x := range s {
		x["kv_cache_percentage"] = float64(i/2%10) / 10 // a request's two entries alike
	}
	return s
}

// BenchmarkSchedulingOverhead is what the Headroom plugins add to one
// scheduling decision of llm-d's scheduler, 16 prefill × 16 decode
// candidates, the predictor on the same host: Headroom's trainer and
// predictor as llm-d's chart runs them beside the EPP (two processes, the
// models trained on the synthetic pool: trees when the xgboost CLI is
// installed, else lines), asked over HTTP (predictor), or the same
// trainer's bundles followed and ranked in the EPP's own process
// (in-process, rankInProcess). Both post what the EPP saw to the trainer,
// as shipped, through a proxy that acknowledges and drops the entries
// (bundlesOnly). The benchmark's process is the EPP, its collector set as
// headroom-epp's in llm-d's chart (package eppgc: GOGC raised within the
// container's memory limit; GOGC set in the environment is kept, so
// GOGC=100 measures Go's default). One op is one request scheduled twice, by the
// shipped config and by the same config without the Headroom plugins
// (withoutHeadroom: llm-d's own decision, the prefix index sized alike), in turns
// whose order alternates, so that both see the same machine; each decision
// is the wall time of the data producers, both profiles and the PreRequest
// hooks, and the request's response then ends it (untimed), as in an EPP,
// so no request's state outlives its op; an op starts every opInterval
// (back-to-back-in-process: as soon as the last one ends). The added
// latency is each
// request's difference between the two decisions; it prints the p50 and
// p99 of each config and of that difference, and the share of rankings
// (the call, or the ranking in process) that alone took longer than
// rankingSlow, from the producer's own histogram; and, from the plugins'
// own histogram of their time in each decision
// (headroom_epp_decision_seconds), its p50 and p99 within buckets and the
// share of decisions in which they took longer than decisionBudget. It
// fails unless every decision of the shipped config was scored, over HTTP
// from one /predict/pairs call, and observed once by that histogram.
func BenchmarkSchedulingOverhead(b *testing.B) {
	// This process is the EPP: its collector runs as headroom-epp's does in
	// a container limited as llm-d's router chart limits the EPP's.
	gc := eppgc.Choose(os.LookupEnv, chartEPPMemoryLimit)
	b.Cleanup(gc.Apply())
	b.Logf("EPP garbage collection: %v", gc)
	_, err := exec.LookPath("xgboost")
	trees := err == nil
	h := startHeadroomSidecars(b, trees)
	h.train(b, benchSamples())
	if trees {
		h.waitForTrees(b)
	}
	b.Logf("models: trees %v", trees)
	b.Run("predictor", func(b *testing.B) { schedulingOverhead(b, h, readConfig(b, shippedConfig), true, opInterval) })
	b.Run("in-process", func(b *testing.B) {
		schedulingOverhead(b, h, inProcess(b, readConfig(b, shippedConfig)), false, opInterval)
	})
	b.Run("back-to-back-in-process", func(b *testing.B) {
		schedulingOverhead(b, h, inProcess(b, readConfig(b, shippedConfig)), false, 0)
	})
}

// chartEPPMemoryLimit is the EPP container's memory limit in llm-d's
// router chart (config/charts/routerlib/values.yaml, router.epp.resources),
// which Headroom's values file leaves as it is.
const chartEPPMemoryLimit = 16 << 30

// opInterval paces BenchmarkSchedulingOverhead's ops: one request every
// millisecond, each scheduled by both configs, so that a 1,000-request-a-
// second EPP is measured (ten times a 16 × 16 pool's rate at a few requests
// a second a pod). Back to back (the back-to-back-in-process run), each
// decision runs beside the ones before it still finishing on the machine's
// two cores: llm-d's prefix producer updates its index in a goroutine of
// its own after each decision (PreRequest), and the next decision's prefix
// lookups wait for that goroutine's lock or for a core. That is an EPP
// saturated on one core, not the cost of a decision.
const opInterval = time.Millisecond

// schedulingOverhead is one of BenchmarkSchedulingOverhead's runs: config
// against itself without the Headroom plugins, its ranking asked of h's
// predictor when overHTTP, its ops paced by interval (inTurns).
func schedulingOverhead(b *testing.B, h *headroom, config []byte, overHTTP bool, interval time.Duration) {
	eps := endpoints(benchFleet())
	reg := prometheus.NewRegistry()
	withPlugins := newRouterWith(b, config, h.predictor, bundlesOnly(b, h.trainer), reg)
	if !overHTTP {
		waitUntilScored(b, withPlugins, reg, eps)
	}
	// The same config without the Headroom plugins, its prefix index sized
	// as shipped, so that the difference is the plugins' alone
	// (BenchmarkPrefixIndexSizing measures the sizing apart).
	stock := newRouter(b, withoutHeadroom(b, config), h.predictor, "")
	warm(b, eps, withPlugins, stock)
	calls0 := pairsCalls(b, h.predictor, 0)
	predictor0 := pidCPU(b, h.predictorPID)
	scored0, late0 := counter(b, reg, "headroom_epp_decisions_total", "outcome", "scored"), counter(b, reg, "headroom_epp_decisions_total", "outcome", "deadline")
	rankings0, decisions0 := histogram(b, reg, "headroom_epp_pairs_call_seconds"), histogram(b, reg, "headroom_epp_decision_seconds")
	with, without, added := inTurns(b, eps, withPlugins, stock, interval)
	n := len(added)
	predictorCPU := pidCPU(b, h.predictorPID) - predictor0
	rankings1, decisions1 := histogram(b, reg, "headroom_epp_pairs_call_seconds"), histogram(b, reg, "headroom_epp_decision_seconds")
	ranked, slow := over(b, rankings0, rankings1, rankingSlow)
	decided, pastBudget := over(b, decisions0, decisions1, decisionBudget)
	predictorCPU /= time.Duration(n)
	// Every decision was scored, over HTTP from one call each, or, on a
	// machine too busy to answer within the producer's deadline, fell back
	// for it (counted; the predictor may then never have read the call).
	// In process, no decision calls the predictor.
	outcome := func(o string) float64 { return counter(b, reg, "headroom_epp_decisions_total", "outcome", o) }
	wantCalls := 0.0
	if overHTTP {
		wantCalls = float64(n)
	}
	calls, scored, late := pairsCalls(b, h.predictor, calls0+wantCalls)-calls0, outcome("scored")-scored0, outcome("deadline")-late0
	if calls > wantCalls || calls < wantCalls-late || scored+late != float64(n) {
		b.Fatalf("%d requests: %v /predict/pairs calls, %v decisions scored, %v past the deadline; want %v calls, each request scored", n, calls, scored, late, wantCalls)
	}
	// What each config's decision costs the EPP's CPU alone, at the loop's
	// pace, half as many requests each: the difference is the plugins'
	// (their share of the garbage collections too). The timed loop cannot
	// tell them apart: each of its ops holds a decision of each config.
	withCPU, stockCPU := cpuInBlocks(b, eps, withPlugins, stock, max(n/2, 1), interval)
	eppCPU := withCPU - stockCPU
	reportQuantiles(b, "headroom", with)
	reportQuantiles(b, "llm-d", without)
	reportQuantiles(b, "added", added)
	// CPU is less bound to the machine's load than wall time.
	b.ReportMetric(ms(eppCPU), "added-epp-cpu-ms")
	b.ReportMetric(ms(stockCPU), "llm-d-epp-cpu-ms")
	b.ReportMetric(ms(predictorCPU), "predictor-cpu-ms")
	// The ranking alone, apart from the decision around it.
	slowShare := float64(slow) / float64(max(ranked, 1))
	b.ReportMetric(slowShare, "rankings-over-0.8ms-share")
	// The plugins' own time in each decision, from the producer's
	// headroom_epp_decision_seconds: apart from llm-d's work beside it, and
	// from the pairing of two decisions' noise that the difference above
	// carries, but not counting what the plugins' garbage slows llm-d's
	// own code by (which the difference does).
	if decided != uint64(n) {
		b.Fatalf("headroom_epp_decision_seconds observed %d decisions of %d", decided, n)
	}
	pastShare := float64(pastBudget) / float64(max(decided, 1))
	p50, p99 := 1000*bucketQuantile(decisions0, decisions1, 0.5), 1000*bucketQuantile(decisions0, decisions1, 0.99)
	b.ReportMetric(p50, "plugins-p50-ms")
	b.ReportMetric(p99, "plugins-p99-ms")
	b.ReportMetric(pastShare, "plugins-over-1ms-share")
	// What the collector's settings cost: the process's peak resident
	// memory so far, both routers' prefix indexes in it.
	peak := peakRSS(b)
	b.ReportMetric(peak, "epp-peak-rss-mb")
	b.Logf("16 x 16, %d requests (%v past the deadline): headroom p50 %.3f p99 %.3f ms, llm-d p50 %.3f p99 %.3f ms; the plugins add p50 %.3f p99 %.3f ms a decision, %.3f ms of the EPP's CPU (llm-d's own decision %.3f) and %.3f ms of the predictor's; %d of %d rankings (%.2f%%) took over %v; the plugins' own time p50 %.3f p99 %.3f ms (within buckets), over %v in %d of %d decisions (%.2f%%); the EPP's peak RSS %.0f MB",
		n, late, ms(quantile(with, 0.5)), ms(quantile(with, 0.99)), ms(quantile(without, 0.5)), ms(quantile(without, 0.99)),
		ms(quantile(added, 0.5)), ms(quantile(added, 0.99)), ms(eppCPU), ms(stockCPU), ms(predictorCPU), slow, ranked, 100*slowShare,
		time.Duration(rankingSlow*float64(time.Second)), p50, p99, time.Duration(decisionBudget*float64(time.Second)),
		pastBudget, decided, 100*pastShare, peak)
}

// scheduleOne schedules a request of 3,000 tokens on r and then answers
// it (untimed), as an EPP would, and returns the decision's wall time:
// the data producers, the profiles and the PreRequest hooks.
func scheduleOne(b *testing.B, r *inproc.Router, eps []fwksched.Endpoint, id string, seed uint32) time.Duration {
	ctx := context.Background()
	req := request(id, 3000, seed, nil)
	start := time.Now()
	res, err := r.Schedule(ctx, req, eps)
	took := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	respond(ctx, r, req, res)
	return took
}

// warm schedules 20 requests on each router: the connections and the
// prefix producers' indexes warm before anything is timed.
func warm(b *testing.B, eps []fwksched.Endpoint, routers ...*inproc.Router) {
	for n := range 20 {
		for _, r := range routers {
			scheduleOne(b, r, eps, fmt.Sprintf("warm-%d", n), uint32(n))
		}
	}
}

// inTurns schedules each of b.Loop's requests on x and on y, first on x
// in even ops and on y in odd ones, so that both see the same machine, an
// op starting every interval (or as soon as the last one ended, when that
// is later; back to back when 0). It returns each request's decision on x,
// on y, and their difference.
func inTurns(b *testing.B, eps []fwksched.Endpoint, x, y *inproc.Router, interval time.Duration) (dx, dy, diff []time.Duration) {
	pace := pacer{interval: interval, next: time.Now()}
	for n := 0; b.Loop(); n++ {
		pace.wait()
		id, seed := fmt.Sprintf("r-%d", n), uint32(1000+n)
		var tx, ty time.Duration
		if n%2 == 0 {
			tx, ty = scheduleOne(b, x, eps, id, seed), scheduleOne(b, y, eps, id, seed)
		} else {
			ty, tx = scheduleOne(b, y, eps, id, seed), scheduleOne(b, x, eps, id, seed)
		}
		dx, dy, diff = append(dx, tx), append(dy, ty), append(diff, tx-ty)
	}
	return dx, dy, diff
}

// cpuInBlocks schedules n requests on each of x and y, paced as inTurns
// paces its ops, in alternating blocks of cpuBlock decisions, and returns
// the process's CPU a decision of each. A block's CPU runs from its first
// decision to the next block's, so that what a decision leaves running in
// the background (llm-d's prefix index updates, the collector's marking)
// is counted with the config that caused it; alternating keeps both
// configs beside the same heap as it grows.
func cpuInBlocks(b *testing.B, eps []fwksched.Endpoint, x, y *inproc.Router, n int, interval time.Duration) (cx, cy time.Duration) {
	const cpuBlock = 50
	var spent [2]time.Duration
	pace := pacer{interval: interval, next: time.Now()}
	for start := 0; start < n; start += cpuBlock {
		for which, r := range [2]*inproc.Router{x, y} {
			cpu0 := processCPU(b)
			for j := start; j < min(start+cpuBlock, n); j++ {
				pace.wait()
				scheduleOne(b, r, eps, fmt.Sprintf("cpu-%d-%d", which, j), uint32(100000+j))
			}
			pace.wait() // the block's last op's interval is the block's too
			spent[which] += processCPU(b) - cpu0
		}
	}
	return spent[0] / time.Duration(n), spent[1] / time.Duration(n)
}

// pacer starts an op every interval, or as soon as the last one ended
// when that is later; back to back when interval is 0.
type pacer struct {
	interval time.Duration
	next     time.Time // when the next op may start
}

// wait sleeps until the next op may start and sets when the one after it
// may.
func (p *pacer) wait() {
	if d := time.Until(p.next); p.interval > 0 && d > 0 {
		time.Sleep(d)
	}
	p.next = time.Now().Add(p.interval)
}

// reportQuantiles reports d's p50 and p99 in milliseconds as name-p50-ms
// and name-p99-ms.
func reportQuantiles(b *testing.B, name string, d []time.Duration) {
	b.ReportMetric(ms(quantile(d, 0.5)), name+"-p50-ms")
	b.ReportMetric(ms(quantile(d, 0.99)), name+"-p99-ms")
}

// BenchmarkPrefixIndexSizing is what the shipped config's sizing of
// llm-d's approximate prefix index (its capacity in its own 64-token
// blocks: it evicts as a pod's KV cache does) costs llm-d's own decision
// beside llm-d's P/D sample, whose index is four times as large and, over
// the benchmark's requests, never full; neither config has a Headroom
// plugin (the shipped one's prefill profile also scores by llm-d's
// active-request-scorer, a read of the in-flight counts).
// Decisions alternate between the two as in
// BenchmarkSchedulingOverhead, on its fleet and requests, at its pace.
func BenchmarkPrefixIndexSizing(b *testing.B) {
	eps := endpoints(benchFleet())
	sized := newRouter(b, withoutHeadroom(b, readConfig(b, shippedConfig)), "http://127.0.0.1:1", "")
	sample := newRouter(b, readConfig(b, stockConfig), "http://127.0.0.1:1", "")
	warm(b, eps, sized, sample)
	ds, dl, added := inTurns(b, eps, sized, sample, opInterval)
	n := len(added)
	reportQuantiles(b, "sized", ds)
	reportQuantiles(b, "sample", dl)
	reportQuantiles(b, "added", added)
	b.Logf("16 x 16, %d requests: the shipped config's index p50 %.3f p99 %.3f ms, llm-d's sample's p50 %.3f p99 %.3f ms; the sizing adds p50 %.3f p99 %.3f ms a decision",
		n, ms(quantile(ds, 0.5)), ms(quantile(ds, 0.99)), ms(quantile(dl, 0.5)), ms(quantile(dl, 0.99)), ms(quantile(added, 0.5)), ms(quantile(added, 0.99)))
}

// rankingSlow is the bound, in seconds, of the producer's ranking
// histogram that the benchmark counts the rankings above: one of
// headroom_epp_pairs_call_seconds' buckets, below the decision's 1 ms.
const rankingSlow = 0.0008

// decisionBudget is the target's bound, in seconds, on the plugins' time
// in one decision: one of headroom_epp_decision_seconds' buckets.
const decisionBudget = 0.001

// histogram is the shipped producer's histogram name (one of
// headroom_epp_pairs_call_seconds, the ranking, and
// headroom_epp_decision_seconds, the plugins' time on a decision).
func histogram(t testing.TB, reg prometheus.Gatherer, name string) *dto.Histogram {
	t.Helper()
	return series(t, reg, name, "plugin", "headroom-pairs-producer").GetHistogram()
}

// over is how many observations h0 and h1 differ by, and how many of
// those were above bound, one of their bucket bounds.
func over(t testing.TB, h0, h1 *dto.Histogram, bound float64) (all, above uint64) {
	t.Helper()
	all = h1.GetSampleCount() - h0.GetSampleCount()
	for k, bk := range h1.GetBucket() {
		if math.Abs(bk.GetUpperBound()-bound) < 1e-12 {
			return all, all - (bk.GetCumulativeCount() - h0.GetBucket()[k].GetCumulativeCount())
		}
	}
	t.Fatalf("histogram has no bucket bound %v", bound)
	return 0, 0
}

// bucketQuantile is the q-quantile of the observations h1 has beyond h0,
// interpolated linearly within its bucket (as Prometheus'
// histogram_quantile does), in seconds; +Inf past the last bound.
func bucketQuantile(h0, h1 *dto.Histogram, q float64) float64 {
	all := float64(h1.GetSampleCount() - h0.GetSampleCount())
	rank := q * all
	lower, below := 0.0, 0.0
	for k, bk := range h1.GetBucket() {
		n := float64(bk.GetCumulativeCount() - h0.GetBucket()[k].GetCumulativeCount())
		if n >= rank {
			if n == below {
				return bk.GetUpperBound()
			}
			return lower + (bk.GetUpperBound()-lower)*(rank-below)/(n-below)
		}
		lower, below = bk.GetUpperBound(), n
	}
	return math.Inf(1)
}

// bundlesOnly is the trainer at target for its bundles, with training
// entries acknowledged and dropped: what the EPP spends building and
// posting them is measured, but not the retrains they would start, the
// xgboost CLI on the benchmark's two cores (a deployment runs the trainer
// in a container of its own).
func bundlesOnly(b *testing.B, target string) string {
	b.Helper()
	u, err := url.Parse(target)
	if err != nil {
		b.Fatal(err)
	}
	trainer := httputil.NewSingleHostReverseProxy(u)
	return newLoopbackServer(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/add_training_data_bulk" {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusAccepted)
			return
		}
		trainer.ServeHTTP(w, r)
	}))
}

// pairsCalls is the /predict/pairs requests the predictor at url has
// counted, from its /metrics (it counts a request after answering it): once
// it has counted want and the count has held for 50 ms, or after a second.
func pairsCalls(t testing.TB, url string, want float64) float64 {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	last := countPairsCalls(t, url)
	for {
		time.Sleep(50 * time.Millisecond)
		n := countPairsCalls(t, url)
		if n == last && n >= want || time.Now().After(deadline) {
			return n
		}
		last = n
	}
}

func countPairsCalls(t testing.TB, url string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "headroom_http_requests_total{") || !strings.Contains(line, `route="/predict/pairs"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		total += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}

// selfUsage is this process's resource usage so far.
func selfUsage(t testing.TB) syscall.Rusage {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru
}

// processCPU is the user and system CPU this process has used.
func processCPU(t testing.TB) time.Duration {
	ru := selfUsage(t)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS is the most resident memory this process has held, in MB
// (Linux's ru_maxrss, in KiB).
func peakRSS(t testing.TB) float64 {
	return float64(selfUsage(t).Maxrss) / 1024
}

// pidCPU is the user and system CPU process pid has used, from Linux's
// /proc (in its clock ticks, USER_HZ, 100 a second); 0 elsewhere.
func pidCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's name, in parentheses: utime and
	// stime are the 12th and 13th.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
