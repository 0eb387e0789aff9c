package api

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/headroomhq/headroom/pairs"
	"github.com/headroomhq/headroom/wire"
)

// pairsMetrics are the series of POST /predict/pairs beyond the request
// counts and latencies every route has.
type pairsMetrics struct {
	pairs *prometheus.HistogramVec
	best  *prometheus.CounterVec
}

func newPairsMetrics(reg prometheus.Registerer) pairsMetrics {
	m := pairsMetrics{
		pairs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "headroom_predict_pairs",
			Help:    "Prefill/decode pairs per /predict/pairs request: considered, and left out because the transfer model knows nothing of their link class.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}, []string{"kind"}),
		best: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "headroom_predict_pairs_best_total",
			Help: "/predict/pairs answers by their best option: split (a prefill/decode pair) or no_split (the decode pod alone).",
		}, []string{"best"}),
	}
	reg.MustRegister(m.pairs, m.best)
	return m
}

// predictPairs ranks the prefill/decode pairs of one request.
func (s *predictorServer) predictPairs(c *gin.Context) {
	start := s.opts.Now()
	if !checkContentType(c) {
		return
	}
	buf, arrived, ok := s.limit.receive(c, s.opts.Limits)
	if !ok {
		return
	}
	req, errs := wire.DecodePairsRequest(*buf, s.opts.Limits.MaxPairCandidates)
	bodyLen := len(*buf)
	putBody(buf)
	if len(errs) > 0 {
		arrived.done()
		writeValidation(c, errs)
		return
	}
	if !checkPairs(c, &req, s.opts.Limits.MaxPairs, s.opts.PairsK) {
		arrived.done()
		return
	}
	nPairs := len(req.Prefill) * len(req.Decode)
	t, ok := s.limit.admit(c, pairsCost(bodyLen, &req), nPairs)
	arrived.done()
	if !ok {
		return
	}
	defer t.release()
	pub, loadedAt := s.p.Current()
	if pub == nil {
		s.pairsNotReady(c)
		return
	}
	models := pairs.FromBundle(pub.Bundle, s.p.Statistic())
	res, _ := s.rankings.Get().(*pairs.Result)
	if res == nil {
		res = new(pairs.Result)
	}
	defer s.rankings.Put(res)
	if err := pairs.Rank(&models, &req, res); err != nil {
		if errors.Is(err, pairs.ErrNotReady) {
			s.pairsNotReady(c)
			return
		}
		writeDetail(c, http.StatusInternalServerError, err.Error())
		return
	}
	s.pairsSeries.pairs.WithLabelValues("considered").Observe(float64(res.TotalPairs))
	s.pairsSeries.pairs.WithLabelValues("unknown_transfer").Observe(float64(res.UnknownPairs))
	best := "no_split"
	if res.Best.Split() {
		best = "split"
	}
	s.pairsSeries.best.WithLabelValues(best).Inc()

	size := (len(res.Pairs)+len(res.NoSplit)+1)*wire.BytesPerPairOption + 512
	if req.Matrix {
		size = wire.BytesPerPairOption + (len(req.Prefill)+2)*len(req.Decode)*wire.BytesPerMatrixCell + 512
	}
	op := s.outPool.Get(size)
	now := s.opts.Now()
	var tsBuf, qBuf [40]byte
	meta := s.meta(loadedAt, now, tsBuf[:0], qBuf[:0])
	*op = wire.AppendPairsResponse(*op, &req, &res.PairsRanking, &meta, msSince(start, now))
	t.computed()
	s.writeJSONBody(c, *op)
	s.outPool.Put(op)
}

func (s *predictorServer) pairsNotReady(c *gin.Context) {
	s.notReady.WithLabelValues("/predict/pairs").Inc()
	writeDetail(c, http.StatusServiceUnavailable, "Models not ready: pair prediction needs a TTFT and a TPOT model")
}
