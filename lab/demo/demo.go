// Package demo shows Headroom learning and routing, with nothing but this
// process: a trainer and a predictor on loopback ports behind their real
// HTTP handlers, a fleet of simulated vLLM servers (package sim), and a
// router in front of them that speaks to the service exactly as llm-d's
// router does — one POST /predict/bulk/strict per request with a row per
// candidate, and TTFT and TPOT samples posted to /add_training_data_bulk.
//
// The fleet runs in simulated time; the HTTP calls are real. The service's
// two timers (retrain, bundle sync) are driven in simulated time too, so a
// run is reproducible from its seed and a minute of traffic does not need
// a minute of waiting.
package demo

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/lab/sim/workload"
)

// Policy names, in the order the comparison runs and reports them.
const (
	RoundRobin = "round-robin"
	LeastQueue = "least-queue"
	LoadPrefix = "load-prefix"
	Predicted  = "predicted"
)

// Policies lists every policy of the comparison, in order (OracleSLO
// follows when SLOs are set: PoliciesFor).
var Policies = []string{RoundRobin, LeastQueue, LoadPrefix, Predicted, Oracle, OracleTTFT}

// Options configure a demo run. Zero values mean DefaultOptions' values.
type Options struct {
	// Duration is the simulated arrival window of each run; Warmup that of
	// the warm-up that trains the first models (negative: no warm-up).
	Duration time.Duration
	Warmup   time.Duration
	// Servers, Rate (requests per second) and Burstiness (Gamma shape of
	// the gaps; 1 is Poisson, below 1 bursty) shape the fleet and its
	// traffic.
	Servers    int
	Rate       float64
	Burstiness float64
	Seed       uint64
	SLO        SLO
	// Engine configures each simulated server (default sim.DefaultConfig);
	// Servers overrides its server count.
	Engine *sim.Config
	// RetrainEvery and FlushEvery are the trainer's retrain interval and the
	// router's sample flush interval, in simulated time.
	RetrainEvery time.Duration
	FlushEvery   time.Duration
	// PredictTimeout bounds one prediction call.
	PredictTimeout time.Duration
	// Epoch is the wall-clock time that simulated time 0 stands for, stamped
	// on every sample. It is fixed by default so that a seed reproduces a
	// run exactly: the store's holdout split hashes each sample.
	Epoch   time.Time
	Service ServiceOptions
	// Progress, when set, receives a line's worth of news at every retrain
	// and at the end of every run.
	Progress func(Progress)
}

// DefaultOptions are sized to show something within a minute of wall time
// on a small machine: 8 servers at 16 requests/s, enough that queues form
// and where a turn goes decides how much of its prompt must be computed,
// for two simulated minutes per policy after a one-minute warm-up. Retrain
// and flush intervals are the service's and llm-d's (10 s, 1 s); the
// prediction deadline is llm-d's (400 ms).
func DefaultOptions() Options {
	return Options{
		Duration: 2 * time.Minute, Warmup: time.Minute, Servers: 8, Rate: 16, Burstiness: 0.5, Seed: 1,
		RetrainEvery: 10 * time.Second, FlushEvery: time.Second, PredictTimeout: 400 * time.Millisecond,
		Epoch: DefaultEpoch,
	}
}

// DefaultEpoch is the default Options.Epoch.
var DefaultEpoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

func (o *Options) setDefaults() error {
	def := DefaultOptions()
	setDuration := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	setDuration(&o.Duration, def.Duration)
	setDuration(&o.Warmup, def.Warmup)
	setDuration(&o.RetrainEvery, def.RetrainEvery)
	setDuration(&o.FlushEvery, def.FlushEvery)
	setDuration(&o.PredictTimeout, def.PredictTimeout)
	if o.Servers == 0 {
		o.Servers = def.Servers
	}
	if o.Rate == 0 {
		o.Rate = def.Rate
	}
	if o.Burstiness == 0 {
		o.Burstiness = def.Burstiness
	}
	if o.Epoch.IsZero() {
		o.Epoch = def.Epoch
	}
	switch {
	case o.Duration < 0:
		return fmt.Errorf("demo: duration %v: must be positive", o.Duration)
	case o.Servers < 1:
		return fmt.Errorf("demo: need at least 1 server, have %d", o.Servers)
	case !(o.Rate > 0) || math.IsInf(o.Rate, 0):
		return fmt.Errorf("demo: rate %v: want a positive number of requests per second", o.Rate)
	case !(o.Burstiness > 0) || math.IsInf(o.Burstiness, 0):
		return fmt.Errorf("demo: burstiness %v: want a positive Gamma shape", o.Burstiness)
	case o.RetrainEvery < 0 || o.FlushEvery < 0 || o.PredictTimeout < 0:
		return fmt.Errorf("demo: intervals must be positive")
	case o.SLO.TTFTMs < 0 || o.SLO.TPOTMs < 0 || math.IsNaN(o.SLO.TTFTMs) || math.IsNaN(o.SLO.TPOTMs):
		return fmt.Errorf("demo: SLOs must be positive (0 = none), have %+v", o.SLO)
	}
	return nil
}

func (o *Options) engine() (sim.Config, error) {
	cfg := sim.DefaultConfig()
	if o.Engine != nil {
		cfg = *o.Engine
	}
	cfg.Servers = o.Servers
	return cfg, cfg.Validate()
}

// Workload generates the demo's traffic: agent sessions (package
// sim/workload's Agentic) sharing a 1 200-token system prompt, each turn
// resending its growing history, so where a turn goes decides how much of
// its prompt is cached (prompts run from about 1 400 to 4 000 tokens), at
// rate·window requests with bursty arrivals. Turns wait for the previous
// answer, as an agent does.
func Workload(window time.Duration, rate, burstiness float64, seed uint64) ([]*sim.Request, error) {
	o := workload.DefaultAgentic(rate)
	n := max(1, int(math.Round(rate*window.Seconds())))
	o.Sessions = max(1, (n+o.Turns-1)/o.Turns)
	o.Arrivals = workload.Arrivals{Rate: rate, Burstiness: burstiness}
	o.Seed = seed
	reqs, err := workload.Agentic(o)
	if err != nil {
		return nil, fmt.Errorf("demo workload: %w", err)
	}
	return reqs, nil
}

// warmupSeed derives the warm-up's traffic from the seed without ever
// equalling the comparison's: the model never sees the arrivals it is
// judged on before it routes them.
func warmupSeed(seed uint64) uint64 { return seed ^ 0x9e3779b97f4a7c15 }

// arrivals are a run's warm-up arrivals (none without a warm-up) and its
// measured ones, each from its own seed so that the measured arrivals do
// not depend on the warm-up's length.
func arrivals(warmup, duration time.Duration, rate, burstiness float64, seed uint64) (warm, reqs []*sim.Request, err error) {
	if warmup > 0 {
		if warm, err = Workload(warmup, rate, burstiness, warmupSeed(seed)); err != nil {
			return nil, nil, err
		}
	}
	if reqs, err = Workload(duration, rate, burstiness, seed); err != nil {
		return nil, nil, err
	}
	return warm, reqs, nil
}

// probeSeed does the same for the probe, which no run replays.
func probeSeed(seed uint64) uint64 { return seed ^ 0xbf58476d1ce4e5b9 }

// probeWindow is the simulated arrival window of the probe's traffic: long
// enough for a few hundred observations at the demo's rates, small enough
// that measuring a bundle on it is one quick bulk call.
const probeWindow = 30 * time.Second

// Run runs the demo: a warm-up on its own traffic, routed by the predicted
// policy from a cold start (llm-d's composite scorer until the first model
// exists), then the same arrivals under each policy in Policies. The
// heuristic runs do not touch the service; the predicted run keeps
// reporting samples and the trainer keeps retraining through it, as under
// llm-d.
func Run(ctx context.Context, opts Options) (*Result, error) {
	start := time.Now()
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	cfg, err := opts.engine()
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	probeReqs, err := Workload(probeWindow, opts.Rate, opts.Burstiness, probeSeed(opts.Seed))
	if err != nil {
		return nil, err
	}
	probe, err := NewProbe(ctx, cfg, probeReqs)
	if err != nil {
		return nil, err
	}
	res := &Result{Servers: cfg.Servers, ProbeRequests: probe.Len()}
	return compare(ctx, start, &opts, sim.SinglePool(cfg), probe, res, PoliciesFor(opts.SLO),
		func(l *learner, name string, reqs []*sim.Request) (PolicyResult, error) {
			switch name {
			case warmupPhase, Predicted:
				return l.learn(ctx, name, reqs, l.predicted(ctx, name == Predicted))
			case Oracle, OracleSLO, OracleTTFT:
				router, foresight, err := oracle(name, opts.SLO)
				if err != nil {
					return PolicyResult{}, err
				}
				return l.runFixed(ctx, name, reqs, &sim.DecodeOnly{Router: router}, foresight)
			}
			router, ok := sim.NewRouter(name)
			if !ok {
				return PolicyResult{}, fmt.Errorf("demo: no router %q", name)
			}
			return l.runFixed(ctx, name, reqs, &sim.DecodeOnly{Router: router}, nil)
		})
}

// warmupPhase names the warm-up run.
const warmupPhase = "warm-up"

// compare is both demos' run: their arrivals, the service, a warm-up on
// traffic of its own (run as warmupPhase, a learning policy from a cold
// start), then the same arrivals under each of policies, each run by
// runPolicy on the fleet cfg; res comes with the fleet's fields set and
// leaves with everything.
func compare(ctx context.Context, start time.Time, opts *Options, cfg sim.PDConfig, probe *Probe, res *Result, policies []string,
	runPolicy func(l *learner, name string, reqs []*sim.Request) (PolicyResult, error)) (*Result, error) {
	warm, reqs, err := arrivals(opts.Warmup, opts.Duration, opts.Rate, opts.Burstiness, opts.Seed)
	if err != nil {
		return nil, err
	}
	so := opts.Service
	so.Start = opts.Epoch // the trainer on the simulation's clock from its start
	svc, err := StartService(so)
	if err != nil {
		return nil, err
	}
	defer svc.Close()
	client := svc.Client()
	res.Rate, res.Burstiness, res.Duration, res.Warmup, res.Seed = opts.Rate, opts.Burstiness, opts.Duration, opts.Warmup, opts.Seed
	res.Requests, res.WarmupRequests, res.SLO, res.XGBoost = len(reqs), len(warm), opts.SLO, svc.XGBoostAvailable()
	l := &learner{opts: opts, cfg: cfg, svc: svc, client: client, rep: NewReporter(client), probe: probe, start: start, res: res}
	if len(warm) > 0 {
		if _, err := runPolicy(l, warmupPhase, warm); err != nil {
			return nil, err
		}
	}
	for _, name := range policies {
		pr, err := runPolicy(l, name, reqs)
		if err != nil {
			return nil, err
		}
		res.Policies = append(res.Policies, pr)
	}
	info, err := client.ModelInfo(ctx)
	if err != nil {
		return nil, err
	}
	res.Model = finalModel(info, res.Disaggregated())
	res.WallSeconds = time.Since(start).Seconds()
	return res, nil
}

// predicted is the predicted policy: a PredictedRouter on the service,
// whose entries are llm-d's router's. The comparison's run (withRegret)
// also looks ahead at every decision, to explain its gap to the oracle;
// the lookahead leaves the run as it would be.
func (l *learner) predicted(ctx context.Context, withRegret bool) learning {
	router := &PredictedRouter{Client: l.client, SLO: l.opts.SLO, Timeout: l.opts.PredictTimeout}
	router.Bind(ctx)
	p := learning{
		router: &sim.DecodeOnly{Router: router},
		estimate: func(o *sim.PDOutcome) (estimate, bool) {
			preds := router.Last()
			if preds == nil {
				return estimate{}, false
			}
			e := preds[o.Decode.Server]
			return estimate{TTFTMs: e.TTFTMs, TPOTMs: e.TPOTMs}, true
		},
		stats:     func() RouterStats { return router.Stats },
		ttftEntry: func(o *sim.PDOutcome, at time.Time) features.Sample { return TTFTEntry(o.Decode, at) },
		tpotEntry: func(o *sim.PDOutcome, at time.Time) (features.Sample, bool) {
			if !o.Decode.Done {
				return features.Sample{}, false
			}
			return TPOTEntry(o.Decode, at)
		},
		liveAgainstLabel: true,
	}
	if withRegret {
		regret := &regretRecorder{inner: router, slo: l.opts.SLO}
		p.router = &sim.DecodeOnly{Router: regret}
		p.finish = func(pr *PolicyResult) { pr.Regret = regret.report() }
	}
	return p
}
