package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/headroomhq/headroom/dashboard"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/bufpool"
	"github.com/headroomhq/headroom/internal/httpmetrics"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/wire"
)

// PredictorOptions configure the prediction server.
type PredictorOptions struct {
	Limits Limits
	Tokens Tokens
	// AllowedHosts: see TrainerOptions.AllowedHosts.
	AllowedHosts []string
	TrainerURL   string // reported, without its credentials, in /status and /
	SyncEvery    time.Duration
	// Reload syncs with the trainer now (POST /reload), with acceptOlder
	// (?accept_older=true) taking its bundle whatever its lineage and age;
	// nil when the bundle comes from a trainer in the same process.
	Reload func(ctx context.Context, acceptOlder bool) (bool, error)
	// Registry receives the server's metrics and is served on /metrics.
	Registry *prometheus.Registry
	Now      func() time.Time
	// MaxConcurrentPredictions (default DefaultMaxConcurrentPredictions)
	// and MaxPredictBytes (default DefaultMaxPredictBytes) bound the
	// prediction requests in progress and the bytes they hold, by
	// estimate; MaxLargePredictions (default: every core but one) those
	// computing over largeWork rows or pairs. A request that finds no
	// room within PredictWait (default DefaultPredictWait) gets 503.
	MaxConcurrentPredictions int
	MaxPredictBytes          int64
	MaxLargePredictions      int
	PredictWait              time.Duration
	// PairsK (default DefaultPairsK) is the pairs /predict/pairs returns
	// to a request that does not say.
	PairsK int
}

type predictorServer struct {
	p     *predictor.Predictor
	opts  PredictorOptions
	limit *predictLimiter

	rowsPool  *bufpool.Pool[features.Row]
	predsPool *bufpool.Pool[wire.Prediction]
	outPool   *bufpool.Pool[byte]

	loadText atomic.Pointer[formattedTime] // the bundle load time, formatted

	clamped     prometheus.Counter
	batchRows   prometheus.Histogram
	notReady    *prometheus.CounterVec
	pairsSeries pairsMetrics
	// rankings recycles pair rankings: a 16 × 16 ranking holds 256
	// options of ~300 bytes each.
	rankings sync.Pool
}

// NewPredictorHandler returns the prediction server's routes.
func NewPredictorHandler(p *predictor.Predictor, opts PredictorOptions) http.Handler {
	opts.Limits.setDefaults()
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	// The URL may carry credentials; the open root shows it.
	if opts.TrainerURL != "" {
		opts.TrainerURL = predictor.RedactedURL(opts.TrainerURL)
	}
	if opts.PairsK <= 0 {
		opts.PairsK = DefaultPairsK
	}
	limit := newPredictLimiter(&opts, opts.Registry)
	s := &predictorServer{p: p, opts: opts, limit: limit}
	// Large means more than a router caller's 100 rows several times over;
	// the largest kept is a 20,000-row request's (~2, 2 and 8 MB).
	s.rowsPool = bufpool.New[features.Row](1024, 20000)
	s.predsPool = bufpool.New[wire.Prediction](1024, 20000)
	s.outPool = bufpool.New[byte](1024*wire.BytesPerPrediction, 20000*wire.BytesPerPrediction)
	s.clamped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "headroom_predict_clamped_in_flight_total",
		Help: "Negative token-in-flight values clamped to 0 on /predict/bulk/strict instead of failing every coalesced caller.",
	})
	s.batchRows = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "headroom_predict_batch_rows",
		Help:    "Rows per prediction request.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 8),
	})
	s.notReady = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "headroom_predict_not_ready_total",
		Help: "Prediction requests answered without predictions because no model was loaded, by route.",
	}, []string{"route"})
	opts.Registry.MustRegister(s.clamped, s.batchRows, s.notReady)
	s.pairsSeries = newPairsMetrics(opts.Registry)

	r := newEngine(httpmetrics.New(opts.Registry, "predictor"))
	read := requireToken(opts.Tokens, readAccess)
	write := requireToken(opts.Tokens, writeAccess)
	r.POST("/predict/bulk/strict", read, s.bulkStrict)
	r.POST("/predict/bulk", read, s.bulk)
	r.POST("/predict", read, s.single)
	r.POST("/predict/pairs", read, s.predictPairs)
	r.GET("/status", read, s.status)
	r.GET("/model/info", read, s.modelInfo)
	r.POST("/reload", write, guardWrites(opts.Tokens, opts.AllowedHosts), s.reload)
	r.GET("/healthz", func(c *gin.Context) {
		c.JSON(http.StatusOK, wire.Health{Status: "ok", Service: "http-based-latency-predictor"})
	})
	r.GET("/readyz", s.readyz)
	r.GET("/", s.root)
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{})))
	return r
}

// pooled holds one request's pooled slices and its place under the
// bounds; give them back with put, once the answer is written.
type pooled struct {
	rows  *[]features.Row
	preds *[]wire.Prediction
	// ticket is the request's place under the bounds (predictLimiter).
	ticket ticket
}

func (s *predictorServer) put(p *pooled) {
	if p.rows != nil {
		s.rowsPool.Put(p.rows)
	}
	if p.preds != nil {
		s.predsPool.Put(p.preds)
	}
	p.ticket.release()
}

// rowBytes is a little less than a router's row takes in JSON (~250 bytes;
// the required fields alone, compact, take ~130): room for
// len(body)/rowBytes rows means a router's body decodes without regrowing
// the slice, while a compact one regrows it once.
const rowBytes = 192

// predictRows decodes a bulk body and predicts it, returning pooled slices
// the caller must give back with s.put(&pool) when ok. preds is nil when no
// model is loaded. Nothing here allocates once the pools are warm.
func (s *predictorServer) predictRows(c *gin.Context, clamp bool) (rows []features.Row, preds []wire.Prediction, loadedAt time.Time, pool pooled, ok bool) {
	if !checkContentType(c) {
		return nil, nil, time.Time{}, pooled{}, false
	}
	buf, arrived, ok := s.limit.receive(c, s.opts.Limits)
	if !ok {
		return nil, nil, time.Time{}, pooled{}, false
	}
	pool.rows = s.rowsPool.Get(min(len(*buf)/rowBytes+1, s.opts.Limits.MaxRows))
	decoded, clamped, errs := wire.DecodeBulkPredictRequest(*buf, s.opts.Limits.MaxRows, clamp, *pool.rows)
	bodyLen := len(*buf)
	putBody(buf)
	*pool.rows = decoded
	if len(errs) > 0 {
		arrived.done()
		s.put(&pool)
		writeValidation(c, errs)
		return nil, nil, time.Time{}, pooled{}, false
	}
	pool.ticket, ok = s.limit.admit(c, bulkCost(bodyLen, len(decoded)), len(decoded))
	arrived.done()
	if !ok {
		s.put(&pool)
		return nil, nil, time.Time{}, pooled{}, false
	}
	if clamped > 0 {
		s.clamped.Add(float64(clamped))
	}
	s.batchRows.Observe(float64(len(decoded)))
	pool.preds = s.predsPool.Get(len(decoded))
	*pool.preds = (*pool.preds)[:len(decoded)]
	preds = *pool.preds
	loadedAt, err := s.p.Predict(decoded, preds)
	if err != nil {
		return decoded, nil, time.Time{}, pool, true
	}
	return decoded, preds, loadedAt, pool, true
}

// bulkStrict is the router's hot path: all rows or none, in order.
func (s *predictorServer) bulkStrict(c *gin.Context) {
	start := s.opts.Now()
	_, preds, loadedAt, pool, ok := s.predictRows(c, true)
	if !ok {
		return
	}
	defer s.put(&pool)
	if preds == nil {
		s.notReady.WithLabelValues("/predict/bulk/strict").Inc()
		writeDetail(c, http.StatusServiceUnavailable, "Models not ready")
		return
	}
	s.writeBulk(c, preds, loadedAt, start, &pool.ticket)
}

// bulk is the partial-failure flavour: always 200, nulls where a row failed.
func (s *predictorServer) bulk(c *gin.Context) {
	start := s.opts.Now()
	rows, preds, loadedAt, pool, ok := s.predictRows(c, false)
	if !ok {
		return
	}
	defer s.put(&pool)
	if preds == nil {
		s.notReady.WithLabelValues("/predict/bulk").Inc()
		ans := wire.BulkNotReady{Predictions: make([]any, len(rows)), Errors: make([]wire.BulkRowError, len(rows)),
			TotalRequests: len(rows), Failed: len(rows)}
		for i := range rows {
			ans.Errors[i] = wire.BulkRowError{Index: i, Error: "Batch prediction error: 503: Models not ready", Request: wire.RowObject(&rows[i])}
		}
		ans.ProcessingTimeMs = msSince(start, s.opts.Now())
		c.JSON(http.StatusOK, ans)
		return
	}
	s.writeBulk(c, preds, loadedAt, start, &pool.ticket)
}

// jsonContentType is shared by every response: net/http only reads header
// values, and a fresh []string per response would be an allocation.
var jsonContentType = []string{"application/json"}

// writeBulk answers preds, giving back t's CPU slot once they are encoded.
func (s *predictorServer) writeBulk(c *gin.Context, preds []wire.Prediction, loadedAt, start time.Time, t *ticket) {
	// Room for the whole answer at once rather than a doubling series (a
	// 10,000-row answer is ~4 MB; the copies showed in profiles).
	op := s.outPool.Get(len(preds)*wire.BytesPerPrediction + 256)
	now := s.opts.Now()
	var tsBuf, qBuf [40]byte
	meta := s.meta(loadedAt, now, tsBuf[:0], qBuf[:0])
	*op = wire.AppendBulkResponse(*op, preds, &meta, msSince(start, now))
	t.computed()
	s.writeJSONBody(c, *op)
	s.outPool.Put(op)
}

// writeJSONBody answers 200 with body, a large one within the write
// deadline of limitWrite. Content-Length is set so the response goes out
// in one piece: net/http otherwise switches to chunked encoding past 2 KB
// (ten predictions).
func (s *predictorServer) writeJSONBody(c *gin.Context, body []byte) {
	limitWrite(c, s.opts.Limits, len(body))
	h := c.Writer.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	c.Writer.WriteHeader(http.StatusOK)
	c.Writer.Write(body) // a failed write is the client gone; nothing to tell it
}

func (s *predictorServer) single(c *gin.Context) {
	if !checkContentType(c) {
		return
	}
	buf, arrived, ok := s.limit.receive(c, s.opts.Limits)
	if !ok {
		return
	}
	row, errs := wire.DecodePredictRequest(*buf)
	bodyLen := len(*buf)
	putBody(buf)
	if len(errs) > 0 {
		arrived.done()
		writeValidation(c, errs)
		return
	}
	t, ok := s.limit.admit(c, bulkCost(bodyLen, 1), 1)
	arrived.done()
	if !ok {
		return
	}
	defer t.release()
	var pred [1]wire.Prediction
	loadedAt, err := s.p.Predict([]features.Row{row}, pred[:])
	if err != nil {
		s.notReady.WithLabelValues("/predict").Inc()
		writeDetail(c, http.StatusServiceUnavailable, "Models not ready")
		return
	}
	var tsBuf, qBuf [40]byte
	meta := s.meta(loadedAt, s.opts.Now(), tsBuf[:0], qBuf[:0])
	s.writeJSONBody(c, wire.AppendPrediction(nil, &pred[0], &meta))
}

// meta is what every prediction object repeats, encoded into the two
// scratch buffers given.
func (s *predictorServer) meta(loadedAt, now time.Time, tsBuf, qBuf []byte) wire.PredictionMeta {
	return wire.PredictionMeta{
		PredictedAt: wire.AppendTimestamp(tsBuf, now),
		Objective:   string(s.p.Objective()),
		Quantile:    wire.AppendFloat(qBuf, s.p.Quantile()),
		LastLoad:    s.lastLoad(loadedAt),
	}
}

// formattedTime is a time with its timestamp text.
type formattedTime struct {
	t    time.Time
	text string
}

// lastLoad returns wire.Timestamp(loadedAt), formatting it only when the bundle
// in service changed since the last call.
func (s *predictorServer) lastLoad(loadedAt time.Time) string {
	if f := s.loadText.Load(); f != nil && f.t.Equal(loadedAt) {
		return f.text
	}
	f := &formattedTime{t: loadedAt, text: wire.Timestamp(loadedAt)}
	s.loadText.Store(f)
	return f.text
}

func (s *predictorServer) status(c *gin.Context) {
	pub, loadedAt := s.p.Current()
	var (
		b       *model.Bundle
		version uint64
	)
	if pub != nil {
		b, version = pub.Bundle, pub.Bundle.Version
	}
	st := wire.PredictorStatus{
		IsReady: s.p.Ready(), Serving: s.serving(), LastModelLoad: nullableTimestamp(loadedAt),
		TrainingServerURL: s.opts.TrainerURL, ModelsExist: map[string]bool{}, KVTransfer: pub.TransferStatus(),
		SplitTTFT:       pub.LawStatus(features.SplitTTFT),
		ModelGeneration: version, Trained: slices.ContainsFunc(features.PodTargets[:], b.Has),
	}
	for _, tg := range features.Targets {
		st.ModelsExist[tg.String()+"_model"] = b.Has(tg)
	}
	if b != nil {
		st.LoadedBundle = &wire.LoadedBundle{AgeSeconds: s.opts.Now().Sub(b.CreatedAt).Seconds(), Checksum: b.Checksum,
			Epoch: b.Epoch, SamplesSeen: b.SamplesSeen()}
	}
	c.JSON(http.StatusOK, st)
}

func (s *predictorServer) modelInfo(c *gin.Context) {
	pub, loadedAt := s.p.Current()
	c.JSON(http.StatusOK, wire.NewModelInfo(pub, loadedAt, s.opts.Now(), nil))
}

func (s *predictorServer) reload(c *gin.Context) {
	acceptOlder, errs := wire.DecodeAcceptOlder(c.Query("accept_older"))
	if len(errs) > 0 {
		writeValidation(c, errs)
		return
	}
	synced := false
	if s.opts.Reload != nil {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 30*time.Second)
		defer cancel()
		var err error
		if synced, err = s.opts.Reload(ctx, acceptOlder); err != nil {
			writeDetail(c, http.StatusInternalServerError, fmt.Sprintf("Error reloading models: %v", err))
			return
		}
	}
	_, loadedAt := s.p.Current()
	c.JSON(http.StatusOK, wire.ReloadAnswer{Synced: synced, Loaded: s.p.Ready(), IsReady: s.p.Ready(), Serving: s.serving(),
		LastLoadTime: nullableTimestamp(loadedAt)})
}

func (s *predictorServer) readyz(c *gin.Context) {
	if !s.p.Ready() {
		writeDetail(c, http.StatusServiceUnavailable, "Models are not ready")
		return
	}
	c.JSON(http.StatusOK, wire.PredictorReadiness{Status: "ready", Serving: s.serving()})
}

func (s *predictorServer) root(c *gin.Context) {
	if wantsPage(c) {
		servePage(c, s.opts.Tokens, func(context.Context) (dashboard.Snapshot, error) {
			return dashboard.FromPredictor(s.p, s.opts.TrainerURL, s.opts.Now()), nil
		})
		return
	}
	c.JSON(http.StatusOK, wire.PredictorRoot{Message: "HTTP-based Latency Predictor is running", Serving: s.serving(),
		IsReady: s.p.Ready(), SyncInterval: int(s.opts.SyncEvery / time.Second), TrainingServer: s.opts.TrainerURL})
}

// serving is the statistic this predictor serves.
func (s *predictorServer) serving() wire.Serving {
	return wire.NewServing(string(s.p.Objective()), s.p.Quantile())
}

func msSince(start, now time.Time) float64 {
	return float64(now.Sub(start).Nanoseconds()) / 1e6
}
