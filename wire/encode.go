package wire

import (
	"bytes"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/headroomhq/headroom/internal/bufpool"
)

// The prediction responses are written by hand: they are the hot path's
// output, their shape is fixed, and appending into a pooled buffer costs a
// fraction of reflection-based encoding (see BenchmarkEncodeBulk in package api).

// Prediction is the answer for one row, the values of one object of a
// prediction response. Bounds are the calibrated 5% and 95% quantiles; for a
// target without a model every field is 0.
type Prediction struct {
	TTFTMs, TPOTMs         float64
	TTFTBounds, TPOTBounds [2]float64
	// Uncertainty is half the 90% interval's width in log space, as a
	// fraction of the prediction: the relative spread the calibration saw.
	TTFTUncertainty, TPOTUncertainty float64
}

// ModelType is the model type reported wherever llm-d's router reads one:
// its client refuses types it does not know, and Headroom's trees are
// XGBoost's. The linear part is described in /model/info.
const ModelType = "xgboost"

// BytesPerPrediction bounds the size of one encoded prediction object
// (typically 400-440 bytes; longer only with unusually long numbers), for
// sizing output buffers so that they do not grow by doubling.
const BytesPerPrediction = 512

// PredictionMeta holds the fields every prediction object repeats, already
// encoded once per response rather than once per prediction.
type PredictionMeta struct {
	PredictedAt []byte // AppendTimestamp's form
	Objective   string
	Quantile    []byte // a JSON number (AppendFloat)
	LastLoad    string // Timestamp's form
}

// AppendBulkResponse writes a /predict/bulk[/strict] success body.
func AppendBulkResponse(dst []byte, preds []Prediction, meta *PredictionMeta, processingMs float64) []byte {
	dst = append(dst, `{"predictions":[`...)
	dst = appendPredictions(dst, preds, meta)
	dst = append(dst, `],"total_requests":`...)
	dst = strconv.AppendInt(dst, int64(len(preds)), 10)
	dst = append(dst, `,"successful_predictions":`...)
	dst = strconv.AppendInt(dst, int64(len(preds)), 10)
	dst = append(dst, `,"failed_predictions":0,"processing_time_ms":`...)
	dst = AppendFloat(dst, processingMs)
	return append(dst, '}')
}

// parallelEncodeRows is the least share of a batch worth a goroutine of its
// own when encoding (about a millisecond of work). Encoding is the largest
// step of a big request that is not already spread over every core.
const parallelEncodeRows = 2048

// appendPredictions writes the prediction objects, comma-separated. Large
// batches are encoded in shares on GOMAXPROCS goroutines and joined.
func appendPredictions(dst []byte, preds []Prediction, meta *PredictionMeta) []byte {
	workers := min(runtime.GOMAXPROCS(0), len(preds)/parallelEncodeRows)
	if workers <= 1 {
		return appendPredictionList(dst, preds, meta)
	}
	return appendPredictionsParallel(dst, preds, meta.clone(), workers)
}

// appendPredictionsParallel is appendPredictions over workers goroutines.
// It takes its own copy of the meta: what goroutines share escapes to the
// heap, and the caller's meta lives on its stack.
func appendPredictionsParallel(dst []byte, preds []Prediction, meta *PredictionMeta, workers int) []byte {
	share := (len(preds) + workers - 1) / workers
	parts := make([]*[]byte, 0, workers-1)
	for lo := share; lo < len(preds); lo += share {
		parts = append(parts, nil)
	}
	var wg sync.WaitGroup
	for w := range parts {
		lo := (w + 1) * share
		hi := min(lo+share, len(preds))
		wg.Go(func() {
			b := partPool.Get((hi-lo)*BytesPerPrediction + 1)
			*b = appendPredictionList(append(*b, ','), preds[lo:hi], meta)
			parts[w] = b
		})
	}
	dst = appendPredictionList(dst, preds[:share], meta)
	wg.Wait()
	for _, p := range parts {
		dst = append(dst, *p...)
		partPool.Put(p)
	}
	return dst
}

// partPool recycles the other workers' shares of a parallel encoding (~2.5
// MB each for 10,000 rows on two cores): allocated afresh, they were most of
// what a large request allocated, and so of the garbage collections that
// slowed some large requests.
var partPool = bufpool.New[byte](256<<10, 32<<20)

// clone returns a copy of m that shares no memory with it. Even the
// strings are copied: escape analysis does not tell fields apart, so
// keeping any of m's pointers would move all of m's buffers to the heap.
func (m *PredictionMeta) clone() *PredictionMeta {
	return &PredictionMeta{
		PredictedAt: bytes.Clone(m.PredictedAt),
		Objective:   strings.Clone(m.Objective),
		Quantile:    bytes.Clone(m.Quantile),
		LastLoad:    strings.Clone(m.LastLoad),
	}
}

// appendPredictionList writes preds, comma-separated.
func appendPredictionList(dst []byte, preds []Prediction, meta *PredictionMeta) []byte {
	for i := range preds {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendPrediction(dst, &preds[i], meta)
	}
	return dst
}

// AppendPrediction writes one prediction object.
func AppendPrediction(dst []byte, p *Prediction, meta *PredictionMeta) []byte {
	dst = append(dst, `{"ttft_ms":`...)
	dst = AppendFloat(dst, p.TTFTMs)
	dst = append(dst, `,"tpot_ms":`...)
	dst = AppendFloat(dst, p.TPOTMs)
	dst = append(dst, `,"ttft_uncertainty":`...)
	dst = AppendFloat(dst, p.TTFTUncertainty)
	dst = append(dst, `,"tpot_uncertainty":`...)
	dst = AppendFloat(dst, p.TPOTUncertainty)
	dst = append(dst, `,"ttft_prediction_bounds":[`...)
	dst = AppendFloat(dst, p.TTFTBounds[0])
	dst = append(dst, ',')
	dst = AppendFloat(dst, p.TTFTBounds[1])
	dst = append(dst, `],"tpot_prediction_bounds":[`...)
	dst = AppendFloat(dst, p.TPOTBounds[0])
	dst = append(dst, ',')
	dst = AppendFloat(dst, p.TPOTBounds[1])
	dst = append(dst, `],"predicted_at":"`...)
	dst = append(dst, meta.PredictedAt...)
	dst = append(dst, `","model_type":"`+ModelType+`","objective_type":"`...)
	dst = append(dst, meta.Objective...)
	dst = append(dst, `","quantile":`...)
	dst = append(dst, meta.Quantile...)
	dst = append(dst, `,"last_model_load":"`...)
	dst = append(dst, meta.LastLoad...)
	return append(dst, `"}`...)
}

// AppendFloat writes the shortest JSON number that reads back as v; a
// non-finite value, which the models never produce, is written as 0 rather
// than as invalid JSON.
func AppendFloat(dst []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(dst, '0')
	}
	return strconv.AppendFloat(dst, v, 'f', -1, 64)
}
