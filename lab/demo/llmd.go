package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
)

// The P/D demo with llm-d's own scheduler in the loop (headroom demo --pd
// LAYOUT --llmd URL): the simulated fleet routed per request by llm-d's
// scheduler, which the llmd module's sim-scheduler serves on loopback
// (this module cannot link llm-d's; llmd/simsched says how), under llm-d's
// stock P/D config with topology affinity and under the same config with
// Headroom's plugins in place of it, learning from the entries those
// plugins post; and the oracle over pairs. The sim-scheduler is told what
// an EPP sees of each response (its first chunk, with the KV transfer's
// time in a header unless NoTransferTiming, and one chunk per further
// token), at simulated times, so that llm-d's in-flight accounting and
// prefix index, and the Headroom producer's training entries, are what an
// EPP in front of the simulated fleet would have.
const (
	// LLMDStock is llm-d's pd-topology-epp-config.yaml: the decode pod by
	// prefix and queue, the prefill pod by prefix, queue and topology
	// affinity to it.
	LLMDStock = "llm-d"
	// LLMDHeadroom is deploy/llm-d/pd-headroom-epp-config.yaml: Headroom's
	// producer and scorers in place of the topology filter and scorer.
	LLMDHeadroom = "headroom"
	// LLMDOracle is the joint rule on foreseen latencies (sim.PairOracle),
	// with llm-d's decider.
	LLMDOracle = "oracle"
)

// LLMDConfigs lists the configs, in the order they run.
var LLMDConfigs = []string{LLMDStock, LLMDHeadroom, LLMDOracle}

// LLMDOptions configure a run with llm-d's scheduler in the loop. The P/D
// options that shape the fleet, its traffic and the service apply; the
// policies are LLMDConfigs.
type LLMDOptions struct {
	PDOptions
	// SchedulerURL is the sim-scheduler's base URL (loopback).
	SchedulerURL string
	// NoTransferTiming leaves the KV transfer's time out of what the EPP
	// sees, as llm-d's sidecar reports today: Headroom's entries then have
	// no actual_kv_transfer_ms.
	NoTransferTiming bool
}

// LLMDResult is a run's figures by config, as --json prints them.
type LLMDResult struct {
	Layout  string                      `json:"layout"`
	Seed    uint64                      `json:"seed"`
	Configs map[string]LLMDConfigResult `json:"configs"`
	// Run is the whole run, for the table.
	Run *Result `json:"-"`
}

// LLMDConfigResult is one config's figures: the client's latencies, SLO
// attainment, the Headroom plugins' fallbacks by reason (the requests they
// left to the stock scorers; none for the other configs) and the KV
// transfers by link class.
type LLMDConfigResult struct {
	Requests        int            `json:"requests"`
	TTFTP50Ms       float64        `json:"ttft_p50_ms"`
	TTFTP95Ms       float64        `json:"ttft_p95_ms"`
	TPOTP50Ms       float64        `json:"tpot_p50_ms"`
	TPOTP95Ms       float64        `json:"tpot_p95_ms"`
	SLOAttainment   *float64       `json:"slo_attainment"`
	Fallbacks       map[string]int `json:"fallbacks"`
	TransfersByLink map[string]int `json:"transfers_by_link"`
}

// llmdProducerTimeout is the Headroom producer's deadline in the loop. The
// shipped 50 ms is a wall-clock budget, and the simulation's routing must
// not depend on how loaded the machine running it is: what the deadline
// costs a real EPP is the overhead benchmark's (docs/PERFORMANCE.md).
const llmdProducerTimeout = "5s"

// llmdIndexBlockTokens is the block size of llm-d's approximate prefix
// index: its floor (minBlockSizeTokens in llm-d's approximateprefix), above
// the engines' 16-token blocks.
const llmdIndexBlockTokens = 64

// llmdPrefixIndex is the approximate prefix index of both llm-d configs
// sized to the fleet's KV cache, as a deployment sizes it to its pods: the
// smallest pod's KV blocks in index blocks. The configs' 31250 (llm-d's
// sample) is another GPU's; and autoTune, which reads the engines' block
// count from their metrics, counts 16-token blocks as index blocks, four
// times the cache. An index that remembers more than the pods hold reports
// prefixes they evicted long ago as cached: the decider and the scorers
// then pile each session's turns on pods that must prefill them again, and
// Headroom's rows claim work done that is not (docs/DEMO.md, "llm-d's
// scheduler in the loop").
func llmdPrefixIndex(cfg sim.PDConfig) map[string]any {
	blocks := cfg.Decode.KVBlocks
	if len(cfg.PrefillPods) > 0 {
		blocks = min(blocks, cfg.Prefill.KVBlocks)
	}
	return map[string]any{"autoTune": false, "blockSizeTokens": llmdIndexBlockTokens,
		"lruCapacityPerServer": max(blocks*sim.BlockSize/llmdIndexBlockTokens, 1)}
}

// RunLLMD runs the comparison: a warm-up routed by the Headroom config
// from a cold start (llm-d's scorers decide until the first models), then
// the same arrivals under each of LLMDConfigs. Every run gets a fresh
// router from the sim-scheduler, as it gets a fresh fleet.
func RunLLMD(ctx context.Context, opts LLMDOptions) (*LLMDResult, error) {
	start := time.Now()
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if opts.SchedulerURL == "" {
		return nil, fmt.Errorf("demo --llmd: no sim-scheduler URL")
	}
	cfg, err := opts.fleet()
	if err != nil {
		return nil, err
	}
	sched := &llmdScheduler{url: opts.SchedulerURL, http: &http.Client{Timeout: time.Minute}}
	res := &Result{Layout: opts.Layout, PrefillPods: opts.PrefillPods, DecodePods: opts.DecodePods,
		KVBytesPerToken: opts.KVBytesPerToken}
	fallbacks := map[string]map[string]int{}
	rule := sim.PairRule{SplitThreshold: opts.SplitThreshold}
	run, err := compare(ctx, start, &opts.Options, cfg, nil, res, LLMDConfigs,
		func(l *learner, name string, reqs []*sim.Request) (PolicyResult, error) {
			if name == LLMDOracle {
				o := &sim.PairOracle{Rule: rule}
				return l.runFixed(ctx, name, reqs, o, func() (estimate, bool) {
					e := o.Foresight()
					return estimate{TTFTMs: e.TTFTMs, TPOTMs: e.TPOTMs, TransferMs: e.TransferMs}, e.TTFTMs > 0
				})
			}
			config, producer := name, map[string]any(nil)
			if name != LLMDStock {
				config = LLMDHeadroom
				producer = map[string]any{
					"predictorURL": l.svc.PredictorURL, "trainerURL": l.svc.TrainerURL,
					"kvBytesPerToken": opts.KVBytesPerToken, "timeout": llmdProducerTimeout,
					// Streamed, so that TTFT is the first token's (a TPOT
					// entry follows at the end); posted when the demo
					// flushes, on its simulated cadence.
					"streamingMode": true, "flushInterval": "24h",
				}
			}
			router, err := sched.newRouter(ctx, config, producer, llmdPrefixIndex(cfg), opts.Seed, !opts.NoTransferTiming)
			if err != nil {
				return PolicyResult{}, err
			}
			defer router.close()
			var pr PolicyResult
			if name == LLMDStock {
				pr, err = l.runFixed(ctx, name, reqs, router, nil)
			} else {
				pr, err = l.learn(ctx, name, reqs, learning{router: router, stats: router.stats, transfers: true,
					estimate: func(*sim.PDOutcome) (estimate, bool) { return estimate{}, false }})
			}
			if err == nil {
				// The run's last responses, which no request after
				// them carried: what the EPP saw to the end.
				err = router.deliver(ctx, name != LLMDStock)
			}
			if err != nil {
				return PolicyResult{}, err
			}
			report, err := router.report()
			if err != nil {
				return PolicyResult{}, err
			}
			if name != LLMDStock {
				fallbacks[name] = report.fallbacks()
			}
			return pr, nil
		})
	if err != nil {
		return nil, err
	}
	out := &LLMDResult{Layout: opts.Layout, Seed: opts.Seed, Configs: map[string]LLMDConfigResult{}, Run: run}
	for _, pr := range run.Policies {
		f := fallbacks[pr.Name]
		if f == nil {
			f = map[string]int{}
		}
		out.Configs[pr.Name] = LLMDConfigResult{Requests: pr.Requests, TTFTP50Ms: pr.TTFTP50Ms, TTFTP95Ms: pr.TTFTP95Ms,
			TPOTP50Ms: pr.TPOTP50Ms, TPOTP95Ms: pr.TPOTP95Ms, SLOAttainment: pr.SLOAttainment, Fallbacks: f,
			TransfersByLink: pr.Links}
	}
	return out, nil
}

// llmdScheduler is a client of the sim-scheduler (llmd/simsched's routes;
// the wire types below are this side's copy of its).
type llmdScheduler struct {
	url  string
	http *http.Client
}

type (
	llmdCreate struct {
		Config      string         `json:"config"`
		Producer    map[string]any `json:"producer,omitempty"`
		PrefixIndex map[string]any `json:"prefix_index,omitempty"`
		Seed        uint64         `json:"seed,omitempty"`
	}
	llmdSchedule struct {
		Events    []llmdEvent    `json:"events,omitempty"`
		NowNs     int64          `json:"now_ns"`
		Request   llmdRequest    `json:"request"`
		Endpoints []llmdEndpoint `json:"endpoints"`
	}
	llmdRequest struct {
		ID           string   `json:"id"`
		PromptTokens int      `json:"prompt_tokens"`
		BlockSize    int      `json:"block_size"`
		BlockHashes  []uint64 `json:"block_hashes,omitempty"`
	}
	llmdEndpoint struct {
		Name     string       `json:"name"`
		Role     string       `json:"role"`
		Topology llmdTopology `json:"topology"`
		Waiting  int          `json:"waiting"`
		Running  int          `json:"running"`
		KVCache  float64      `json:"kv_cache"`
	}
	llmdTopology struct {
		Node   string `json:"node"`
		Rack   string `json:"rack,omitempty"`
		Zone   string `json:"zone,omitempty"`
		Region string `json:"region,omitempty"`
	}
	llmdPicks struct {
		Decode  string `json:"decode"`
		Prefill string `json:"prefill"`
	}
	llmdEvent struct {
		Kind         string  `json:"kind"`
		ID           string  `json:"id"`
		AtNs         int64   `json:"at_ns"`
		TransferMs   float64 `json:"transfer_ms,omitempty"`
		OutputTokens int     `json:"output_tokens,omitempty"`
	}
	llmdEvents struct {
		Events []llmdEvent `json:"events,omitempty"`
		Flush  bool        `json:"flush,omitempty"`
	}
	// llmdReport is what the Headroom plugins of a router did.
	llmdReport struct {
		Decisions       map[string]int `json:"decisions"`
		TrainingEntries map[string]int `json:"training_entries"`
	}
)

// scored is the decisions outcome of a request the Headroom plugins
// scored; every other outcome is a reason they left it to llm-d's scorers.
const scored = "scored"

// fallbacks is the report's decisions other than scored.
func (r llmdReport) fallbacks() map[string]int {
	out := map[string]int{}
	for k, v := range r.Decisions {
		if k != scored {
			out[k] = v
		}
	}
	return out
}

func (s *llmdScheduler) call(ctx context.Context, method, path string, body, out any, want int) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("llm-d scheduler %s: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+path, rd)
	if err != nil {
		return fmt.Errorf("llm-d scheduler: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if err := doJSON(s.http, req, want, out); err != nil {
		return fmt.Errorf("llm-d scheduler: %w", err)
	}
	return nil
}

// newRouter asks for a router of config, its Headroom producer's and
// approximate prefix index's parameters overridden and its tie breaks
// seeded with the run's seed; timing says whether the EPP sees each
// transfer's time.
func (s *llmdScheduler) newRouter(ctx context.Context, config string, producer, prefixIndex map[string]any, seed uint64, timing bool) (*llmdRouter, error) {
	var created struct {
		ID string `json:"id"`
	}
	if err := s.call(ctx, http.MethodPost, "/routers", llmdCreate{Config: config, Producer: producer, PrefixIndex: prefixIndex, Seed: seed}, &created, http.StatusCreated); err != nil {
		return nil, err
	}
	return &llmdRouter{ctx: ctx, s: s, path: "/routers/" + created.ID, timing: timing}, nil
}

// llmdRouter is one sim-scheduler router as a sim.PDRouter that watches
// its fleet (fleetObserver): it sends each request with the candidates'
// state and the events since the last call, and reads llm-d's picks. A
// failed call fails the run (err), the request going to decode pod 0.
type llmdRouter struct {
	ctx    context.Context
	s      *llmdScheduler
	path   string
	timing bool

	now     func() time.Duration
	stamp   func(time.Duration) time.Time
	pending []llmdEvent
	err     error

	index map[string]int // pod name → its index in its pool
	body  llmdSchedule
}

var _ fleetObserver = (*llmdRouter)(nil)

func (r *llmdRouter) attach(now func() time.Duration, stamp func(time.Duration) time.Time) {
	r.now, r.stamp = now, stamp
}

func (r *llmdRouter) firstToken(o *sim.PDOutcome) {
	ev := llmdEvent{Kind: "first_token", ID: strconv.Itoa(o.Request.ID), AtNs: r.at(o.Decode.FirstToken)}
	if r.timing {
		ev.TransferMs = ms(o.KVTransferTime())
	}
	r.pending = append(r.pending, ev)
}

func (r *llmdRouter) finished(o *sim.PDOutcome) {
	r.pending = append(r.pending, llmdEvent{Kind: "end", ID: strconv.Itoa(o.Request.ID), AtNs: r.at(o.Decode.Finish),
		OutputTokens: o.Request.OutputTokens})
}

// at is the run's simulated time t in Unix nanoseconds; a request rejected
// at dispatch (no finish time) ends now.
func (r *llmdRouter) at(t time.Duration) int64 {
	if t == 0 {
		t = r.now()
	}
	return r.stamp(t).UnixNano()
}

// RoutePD implements sim.PDRouter.
func (r *llmdRouter) RoutePD(req *sim.Request, prefill, decode []sim.PodState) sim.PDChoice {
	fallback := sim.PDChoice{Prefill: sim.NoSplit}
	if r.err != nil {
		return fallback
	}
	if r.index == nil {
		r.index = map[string]int{}
		for i := range prefill {
			r.index[PodName("prefill", i)] = i
		}
		for i := range decode {
			r.index[PodName("decode", i)] = i
		}
	}
	hashes := req.BlockHashes[:min(len(req.BlockHashes), req.PromptTokens/sim.BlockSize)]
	b := &r.body
	*b = llmdSchedule{Events: r.pending, NowNs: r.at(r.now()), Endpoints: b.Endpoints[:0],
		Request: llmdRequest{ID: strconv.Itoa(req.ID), PromptTokens: req.PromptTokens, BlockSize: sim.BlockSize, BlockHashes: hashes}}
	for _, pool := range []struct {
		role string
		pods []sim.PodState
	}{{"prefill", prefill}, {"decode", decode}} {
		for i, p := range pool.pods {
			t := p.Topology
			b.Endpoints = append(b.Endpoints, llmdEndpoint{Name: PodName(pool.role, i), Role: pool.role,
				Topology: llmdTopology{Node: t.Node, Rack: t.Rack, Zone: t.Zone, Region: t.Region},
				Waiting:  p.NumRequestWaiting, Running: p.NumRequestRunning, KVCache: p.KVCachePercentage})
		}
	}
	var picks llmdPicks
	if err := r.s.call(r.ctx, http.MethodPost, r.path+"/schedule", b, &picks, http.StatusOK); err != nil {
		r.err = err
		return fallback
	}
	r.pending = r.pending[:0]
	d, ok := r.index[picks.Decode]
	if !ok || picks.Decode == "" || picks.Decode[0] != 'd' {
		r.err = fmt.Errorf("llm-d scheduler: request %d: decode pick %q is not a decode pod", req.ID, picks.Decode)
		return fallback
	}
	c := sim.PDChoice{Prefill: sim.NoSplit, Decode: d}
	if picks.Prefill != "" {
		p, ok := r.index[picks.Prefill]
		if !ok || picks.Prefill[0] != 'p' {
			r.err = fmt.Errorf("llm-d scheduler: request %d: prefill pick %q is not a prefill pod", req.ID, picks.Prefill)
			return fallback
		}
		c.Prefill = p
	}
	return c
}

// flush delivers the pending events and has the Headroom producers post
// their entries.
func (r *llmdRouter) flush(ctx context.Context) error { return r.deliver(ctx, true) }

// deliver delivers the pending events, the producers posting their entries
// after them with flush.
func (r *llmdRouter) deliver(ctx context.Context, flush bool) error {
	if r.err != nil {
		return r.err
	}
	err := r.s.call(ctx, http.MethodPost, r.path+"/events", llmdEvents{Events: r.pending, Flush: flush}, nil, http.StatusNoContent)
	if err != nil {
		r.err = err
		return err
	}
	r.pending = r.pending[:0]
	return nil
}

func (r *llmdRouter) report() (llmdReport, error) {
	var rep llmdReport
	err := r.s.call(r.ctx, http.MethodGet, r.path+"/report", nil, &rep, http.StatusOK)
	return rep, err
}

// stats is the report as RouterStats.
func (r *llmdRouter) stats() RouterStats {
	rep, err := r.report()
	if err != nil {
		return RouterStats{LastError: err}
	}
	s := RouterStats{Routed: rep.Decisions[scored], NotReady: rep.Decisions["no_model"],
		Extrapolated: rep.Decisions["extrapolated"]}
	for k, v := range rep.Decisions {
		if k != scored && k != "no_model" && k != "extrapolated" {
			s.Failed += v
		}
	}
	return s
}

func (r *llmdRouter) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = r.s.call(ctx, http.MethodDelete, r.path, nil, nil, http.StatusNoContent)
}

// WriteLLMDJSON writes r as --json prints it: {"layout", "seed",
// "configs": {name: LLMDConfigResult}}.
func WriteLLMDJSON(w io.Writer, r *LLMDResult) error { return writeIndented(w, "demo --llmd", r) }

// WriteLLMDTable writes the run's comparison table, then each config's
// fallbacks and Headroom's TTFT p95 against the others'.
func WriteLLMDTable(w io.Writer, r *LLMDResult) error {
	if err := WriteTable(w, r.Run); err != nil {
		return err
	}
	var buf bytes.Buffer
	for _, name := range LLMDConfigs {
		c, ok := r.Configs[name]
		if !ok || len(c.Fallbacks) == 0 {
			continue
		}
		keys := slices.Sorted(maps.Keys(c.Fallbacks))
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %d", k, c.Fallbacks[k])
		}
		fmt.Fprintf(&buf, "%s: requests left to llm-d's scorers: %s\n", name, strings.Join(parts, ", "))
	}
	h, ok := r.Configs[LLMDHeadroom]
	for _, other := range []string{LLMDStock, LLMDOracle} {
		if o, found := r.Configs[other]; ok && found && o.TTFTP95Ms > 0 {
			fmt.Fprintf(&buf, "headroom's TTFT p95 against %s's: %+.1f%%\n", other, 100*(h.TTFTP95Ms/o.TTFTP95Ms-1))
		}
	}
	_, err := w.Write(buf.Bytes())
	return err
}
