package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/headroomhq/headroom/dashboard"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/admission"
	"github.com/headroomhq/headroom/internal/httpmetrics"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer"
	"github.com/headroomhq/headroom/wire"
)

// TrainerOptions configure the training server.
type TrainerOptions struct {
	Limits    Limits
	Tokens    Tokens
	Objective predictor.Objective
	Quantile  float64
	// Registry receives the server's metrics and is served on /metrics.
	Registry *prometheus.Registry
	Now      func() time.Time
	// MaxConcurrentIngest (default 16) and MaxIngestBytes (default 128 MiB
	// of request bodies) bound the uploads handled at once; one that does
	// not fit waits up to IngestWait (default 1 s), then gets 503.
	MaxConcurrentIngest int
	MaxIngestBytes      int64
	IngestWait          time.Duration
	// Draining is closed when the server begins to shut down: bundle
	// requests waiting for a new version (?wait=) answer at once, so that
	// they do not hold the shutdown for its whole grace.
	Draining <-chan struct{}
	// AllowedHosts are the host names (besides loopback and IP literals)
	// state-changing requests may be addressed to when no write token is
	// configured (guardWrites).
	AllowedHosts []string
	// MaxIngestPerClient (default 32) bounds the uploads one client
	// address may have whose bodies are still arriving.
	MaxIngestPerClient int
	// MaxBundleWatchers (default DefaultMaxBundleWatchers) bounds the long
	// polls for a new bundle (GET /model/bundle?wait=) held at once, and
	// MaxBundleWatchersPerClient (default DefaultMaxBundleWatchersPerClient)
	// those of one client address.
	MaxBundleWatchers, MaxBundleWatchersPerClient int
}

type trainerServer struct {
	t       *trainer.Trainer
	db      *store.DB
	opts    TrainerOptions
	uploads *ingestLimiter
	clients *clientLimiter
	watches *admission.Clients // long polls held

	ingested *prometheus.CounterVec
	rejected prometheus.Counter
	watchers prometheus.Gauge
	// watchRefusals counts long polls refused by the watcher bounds.
	watchRefusals prometheus.Counter
}

// NewTrainerHandler returns the training server's routes.
func NewTrainerHandler(t *trainer.Trainer, db *store.DB, opts TrainerOptions) http.Handler {
	_, h := newTrainerServer(t, db, opts)
	return h
}

func newTrainerServer(t *trainer.Trainer, db *store.DB, opts TrainerOptions) (*trainerServer, http.Handler) {
	opts.Limits.setDefaults()
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Objective == "" {
		opts.Objective = predictor.Mean
	}
	if opts.Quantile == 0 {
		opts.Quantile = model.DefaultQuantile
	}
	s := &trainerServer{t: t, db: db, opts: opts}
	s.ingested = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "headroom_samples_ingested_total",
		Help: "Ingested entries by outcome: stored (committed to the store), or duplicate (identical to a sample the store holds: acknowledged, not stored again).",
	}, []string{"outcome"})
	s.rejected = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "headroom_samples_rejected_total",
		Help: "Ingested entries refused by validation; the rest of their batch is kept.",
	})
	s.watchers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "headroom_bundle_watchers",
		Help: "Bundle requests held open until a new version is published (GET /model/bundle?wait=): about one per predictor.",
	})
	s.watchRefusals = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "headroom_bundle_watchers_refused_total",
		Help: "Bundle long polls answered at once with 429 or 503 because the bounds on held long polls (per client address, in all) were reached.",
	})
	opts.Registry.MustRegister(s.ingested, s.rejected, s.watchers, s.watchRefusals)
	if opts.MaxBundleWatchers <= 0 {
		opts.MaxBundleWatchers = DefaultMaxBundleWatchers
	}
	if opts.MaxBundleWatchersPerClient <= 0 {
		opts.MaxBundleWatchersPerClient = DefaultMaxBundleWatchersPerClient
	}
	s.watches = admission.NewClients(opts.MaxBundleWatchersPerClient, opts.MaxBundleWatchers)
	s.uploads = newIngestLimiter(opts.MaxConcurrentIngest, opts.MaxIngestBytes, opts.IngestWait, opts.Registry)
	s.clients = newClientLimiter(opts.MaxIngestPerClient, opts.MaxIngestBytes)

	r := newEngine(httpmetrics.New(opts.Registry, "trainer"))
	read := requireToken(opts.Tokens, readAccess)
	write := []gin.HandlerFunc{requireToken(opts.Tokens, writeAccess), guardWrites(opts.Tokens, opts.AllowedHosts)}
	r.POST("/add_training_data_bulk", append(write, s.ingestBulk)...)
	r.POST("/samples", append(write, s.ingestSamples)...)
	r.POST("/flush", append(write, s.flush)...)
	r.GET("/model/bundle", read, s.bundle)
	r.GET("/model/info", read, s.modelInfo)
	r.GET("/model/download/info", read, s.downloadInfo)
	r.GET("/model/:target/xgb/json", read, s.treesJSON)
	r.GET("/data/status", read, s.dataStatus)
	r.GET("/status", read, s.status)
	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, wire.Health{Status: "ok"}) })
	r.GET("/readyz", s.readyz)
	r.GET("/", s.root)
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{})))
	return s, r
}

// ingestBulk is llm-d's POST /add_training_data_bulk: {"entries": [...]}.
func (s *trainerServer) ingestBulk(c *gin.Context) { s.ingest(c, wire.DecodeTrainingBulk) }

// ingestSamples is Headroom's POST /samples: one sample, an array, or
// {"entries": [...]}.
func (s *trainerServer) ingestSamples(c *gin.Context) { s.ingest(c, wire.DecodeSamples) }

// ingest validates every entry, stores the valid ones in one durable commit,
// and only then answers 202. Invalid entries are reported by index and do
// not cost their batch its valid entries, unlike the reference.
func (s *trainerServer) ingest(c *gin.Context, decode func([]byte, int) ([]features.Sample, []wire.Rejection, []wire.FieldError)) {
	if !checkContentType(c) {
		return
	}
	// The body is read before the upload takes a place in the limits, so
	// that a client sending slowly holds nothing others need (readBody
	// cuts it off below the minimum transfer rate); while it arrives, the
	// client's address may have only so many uploads in that state.
	if !s.clients.enter(c) {
		return
	}
	unmeter := s.clients.meter(c)
	body, release, ok := readBodyOrFail(c, s.opts.Limits)
	s.clients.leave(c)
	if !ok {
		unmeter()
		return
	}
	// The bytes stay counted as arriving until the upload has its place
	// below: between the two bounds, nothing is held uncounted.
	reserved, ok := s.uploads.acquire(c, int64(len(body)))
	unmeter()
	if !ok {
		release()
		return
	}
	defer s.uploads.Release(reserved)
	samples, rejected, envErrs := decode(body, s.opts.Limits.MaxEntries)
	release()
	if len(envErrs) > 0 {
		writeValidation(c, envErrs)
		return
	}
	s.rejected.Add(float64(len(rejected)))
	if len(samples) == 0 && len(rejected) > 0 {
		details := make([]wire.FieldError, 0, len(rejected))
		for _, r := range rejected {
			details = append(details, r.Errors...)
		}
		c.JSON(http.StatusUnprocessableEntity, wire.Detail{Detail: details, Rejected: rejected})
		return
	}
	now := s.opts.Now().UTC()
	for i := range samples {
		if samples[i].Timestamp.IsZero() {
			samples[i].Timestamp, samples[i].Stamped = now, true
		}
	}
	res, err := s.db.Add(samples)
	if err != nil {
		writeStoreError(c, "Failed to add training data in bulk", err)
		return
	}
	// A duplicate is acknowledged, as what it carries is durable, but it
	// is no new observation: the live figures and the gate's live window
	// see each sample once, as the store does.
	s.t.ObserveServed(res.Fresh(samples))
	s.ingested.WithLabelValues("stored").Add(float64(len(samples) - res.Duplicates))
	if res.Duplicates > 0 {
		s.ingested.WithLabelValues("duplicate").Add(float64(res.Duplicates))
	}
	if rejected == nil {
		rejected = []wire.Rejection{}
	}
	c.JSON(http.StatusAccepted, wire.IngestAnswer{
		Message: fmt.Sprintf("Accepted %d training samples.", len(samples)), Accepted: len(samples), Rejected: rejected,
		Stored: wire.Stored{Train: res.Train[:], Holdout: res.Holdout[:], HoldoutOverflow: res.HoldoutOverflow[:],
			Evicted: res.Evicted[:], Discarded: res.Discarded, Duplicates: res.Duplicates},
	})
}

func (s *trainerServer) flush(c *gin.Context) {
	body, release, ok := readBodyOrFail(c, s.opts.Limits)
	if !ok {
		return
	}
	req, errs := wire.DecodeFlushRequest(body)
	release()
	if len(errs) > 0 {
		writeValidation(c, errs)
		return
	}
	// Without a write token nothing proves the request deliberate: it
	// must say so. The llm-d router never calls /flush (spec §3.2).
	if s.opts.Tokens.Write == "" && !req.Confirm {
		writeValidation(c, []wire.FieldError{{Type: "missing", Loc: []any{"body", "confirm"},
			Msg: `Field required: with no write token configured, /flush deletes samples only when the body says {"confirm": true}`}})
		return
	}
	res, err := s.db.Flush(req.FlushTrainingData, req.FlushTestData, features.Targets[:]...)
	if err != nil {
		writeStoreError(c, "Failed to flush data", err)
		return
	}
	var flushed wire.FlushResponse
	for _, tg := range features.Targets {
		flushed.Flushed = append(flushed.Flushed, wire.FlushedTarget{Target: tg, Train: res.Train[tg], Test: res.Holdout[tg]})
	}
	c.JSON(http.StatusOK, flushed.Complete(req, s.opts.Now()))
}

// bundle serves the current bundle to predictors, with ETag and
// If-None-Match so an unchanged bundle costs a 304. With ?wait=D (a
// duration such as 30s, or seconds) a request that would get that 304, or
// a 404 before the first bundle, is held until a new version is published
// or D has passed (at most wire.MaxBundleWait): a predictor learns of a new
// bundle the moment it is published, without polling for it.
func (s *trainerServer) bundle(c *gin.Context) {
	wait, ok := bundleWait(c)
	if !ok {
		return
	}
	inm := c.GetHeader("If-None-Match")
	pub, ok := s.awaitBundle(c, inm, wait)
	if !ok {
		return
	}
	if pub == nil {
		writeDetail(c, http.StatusNotFound, "no bundle published yet")
		return
	}
	etag := pub.ETag()
	c.Header("ETag", etag)
	c.Header("X-Headroom-Bundle-Version", fmt.Sprint(pub.Bundle.Version))
	if pub.Bundle.Epoch != "" {
		c.Header("X-Headroom-Bundle-Epoch", pub.Bundle.Epoch)
	}
	if etagMatches(inm, etag) {
		c.Status(http.StatusNotModified)
		return
	}
	c.Data(http.StatusOK, "application/json", pub.Encoded)
}

func (s *trainerServer) counts(t features.Target) (int, int) {
	cts := s.db.Counts()
	return cts.Train(t), cts.Holdout(t)
}

func (s *trainerServer) modelInfo(c *gin.Context) {
	info := wire.NewModelInfo(s.t.Current(), time.Time{}, s.opts.Now(), s.counts)
	info.Training = s.t.Status()
	c.JSON(http.StatusOK, info)
}

func (s *trainerServer) downloadInfo(c *gin.Context) {
	var b *model.Bundle
	if pub := s.t.Current(); pub != nil {
		b = pub.Bundle
	}
	info := wire.DownloadInfo{Serving: s.serving(), ModelStatus: map[string]bool{},
		Endpoints: wire.Endpoints{Trees: map[string]string{}, Bundle: "/model/bundle", Info: "/model/info"},
		EvaluationInfo: wire.EvaluationInfo{
			QuantileLoss:         "Lower is better",
			CoveragePercent:      fmt.Sprintf("Target: %.1f%%", s.opts.Quantile*100),
			ViolationRatePercent: fmt.Sprintf("Target: %.1f%%", (1-s.opts.Quantile)*100),
			MAPEPercent:          "Holdout mean absolute percentage error, per target, in /model/info",
		}}
	for _, tg := range features.Targets {
		info.ModelStatus[tg.String()+"_model_ready"] = b.Has(tg)
		if tg.PerPod() {
			info.Endpoints.Trees[tg.String()+"_trees"] = "/model/" + tg.String() + "/xgb/json"
		}
	}
	c.JSON(http.StatusOK, info)
}

// treesJSON serves a target's trees in XGBoost's JSON dump format. The dump
// is built per bundle, not per call.
func (s *trainerServer) treesJSON(c *gin.Context) {
	t, ok := features.ParseTarget(c.Param("target"))
	if !ok {
		writeDetail(c, http.StatusNotFound, "Not Found")
		return
	}
	name := strings.ToUpper(t.String())
	pub := s.t.Current()
	m := pub.Target(t)
	if m == nil || m.Trees == nil {
		writeDetail(c, http.StatusNotFound, name+" model not available")
		return
	}
	data, err := pub.TreeDump(t)
	if err != nil {
		writeDetail(c, http.StatusInternalServerError, "Error dumping "+name+" XGBoost trees")
		return
	}
	c.Data(http.StatusOK, "application/json", data)
}

func (s *trainerServer) dataStatus(c *gin.Context) {
	cts := s.db.Counts()
	st := wire.DataStatus{ModelReady: s.t.Current() != nil, LastRetrain: nullableTimestamp(s.t.Status().LastSuccess())}
	for _, tg := range features.Targets {
		st.Training = append(st.Training, wire.TargetCount{Target: tg, N: cts.Train(tg)})
		st.Test = append(st.Test, wire.TargetCount{Target: tg, N: cts.Holdout(tg)})
		st.Buckets = append(st.Buckets, wire.TargetBuckets{Target: tg, Buckets: s.db.BucketCounts(tg)})
	}
	c.JSON(http.StatusOK, st)
}

func (s *trainerServer) status(c *gin.Context) {
	pub := s.t.Current()
	var version uint64
	if pub != nil {
		version = pub.Bundle.Version
	}
	st := s.t.Status()
	cts := s.db.Counts()
	ans := wire.TrainerStatus{IsReady: pub != nil, Serving: s.serving(), ModelGeneration: version, BundleEpoch: s.t.Epoch(),
		XGBoostAvailable: st.XGBoostAvailable, XGBoostError: st.XGBoostError, Training: st.Targets,
		Samples: map[string]wire.TargetSamples{}, KVTransfer: pub.TransferStatus(),
		SplitTTFT: pub.LawStatus(features.SplitTTFT)}
	for _, tg := range features.Targets {
		ans.Samples[tg.String()] = wire.TargetSamples{Train: cts.Train(tg), Holdout: cts.Holdout(tg)}
	}
	c.JSON(http.StatusOK, ans)
}

func (s *trainerServer) readyz(c *gin.Context) {
	// The trainer can take samples from its first second, so it is ready
	// then; model state is in /status. Reporting "not ready" until a first
	// model would keep an EPP pod (whose sidecar this is) out of service
	// exactly when it must start collecting samples.
	c.JSON(http.StatusOK, wire.TrainerReadiness{Status: "ready", ModelReady: s.t.Current() != nil})
}

func (s *trainerServer) root(c *gin.Context) {
	if wantsPage(c) {
		servePage(c, s.opts.Tokens, func(ctx context.Context) (dashboard.Snapshot, error) {
			return dashboard.FromTrainer(ctx, s.t, s.db, s.opts.Now())
		})
		return
	}
	desc := "Predicting mean TTFT and TPOT latencies"
	if s.opts.Objective == predictor.Quantile {
		desc = fmt.Sprintf("Predicting %g%% quantile for TTFT and TPOT latencies", s.opts.Quantile*100)
	}
	c.JSON(http.StatusOK, wire.TrainerRoot{Message: "Latency Predictor is running.", Serving: s.serving(), Description: desc})
}

// serving is the statistic the predictors this trainer trains for serve.
func (s *trainerServer) serving() wire.Serving {
	return wire.NewServing(string(s.opts.Objective), s.opts.Quantile)
}
