package api

import (
	"bytes"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/headroomhq/headroom/predictor"
)

// The prediction responses are written by hand: they are the hot path's
// output, their shape is fixed, and appending into a pooled buffer costs a
// fraction of reflection-based encoding (see BenchmarkEncodeBulk).

// predictionMeta holds the fields every prediction object repeats, already
// encoded once per response rather than once per prediction.
type predictionMeta struct {
	predictedAt []byte // RFC 3339 with Z
	objective   string
	quantile    []byte // a JSON number
	lastLoad    string // RFC 3339 with Z
}

// appendBulkResponse writes a /predict/bulk[/strict] success body.
func appendBulkResponse(dst []byte, preds []predictor.Prediction, meta *predictionMeta, processingMs float64) []byte {
	dst = append(dst, `{"predictions":[`...)
	dst = appendPredictions(dst, preds, meta)
	dst = append(dst, `],"total_requests":`...)
	dst = strconv.AppendInt(dst, int64(len(preds)), 10)
	dst = append(dst, `,"successful_predictions":`...)
	dst = strconv.AppendInt(dst, int64(len(preds)), 10)
	dst = append(dst, `,"failed_predictions":0,"processing_time_ms":`...)
	dst = appendFloat(dst, processingMs)
	return append(dst, '}')
}

// parallelEncodeRows is the least share of a batch worth a goroutine of its
// own when encoding (about a millisecond of work). Encoding is the largest
// step of a big request that is not already spread over every core.
const parallelEncodeRows = 2048

// appendPredictions writes the prediction objects, comma-separated. Large
// batches are encoded in shares on GOMAXPROCS goroutines and joined.
func appendPredictions(dst []byte, preds []predictor.Prediction, meta *predictionMeta) []byte {
	workers := min(runtime.GOMAXPROCS(0), len(preds)/parallelEncodeRows)
	if workers <= 1 {
		return appendPredictionList(dst, preds, meta)
	}
	return appendPredictionsParallel(dst, preds, meta.clone(), workers)
}

// appendPredictionsParallel is appendPredictions over workers goroutines.
// It takes its own copy of the meta: what goroutines share escapes to the
// heap, and the caller's meta lives on its stack.
func appendPredictionsParallel(dst []byte, preds []predictor.Prediction, meta *predictionMeta, workers int) []byte {
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
			b := partPool.get((hi-lo)*bytesPerPrediction + 1)
			*b = appendPredictionList(append(*b, ','), preds[lo:hi], meta)
			parts[w] = b
		})
	}
	dst = appendPredictionList(dst, preds[:share], meta)
	wg.Wait()
	for _, p := range parts {
		dst = append(dst, *p...)
		partPool.put(p)
	}
	return dst
}

// partPool recycles the other workers' shares of a parallel encoding (~2.5
// MB each for 10,000 rows on two cores): allocated afresh, they were most of
// what a large request allocated, and so of the garbage collections that
// slowed some large requests.
var partPool = newBufferPool[byte](256<<10, 32<<20)

// clone returns a copy of m that shares no memory with it. Even the
// strings are copied: escape analysis does not tell fields apart, so
// keeping any of m's pointers would move all of m's buffers to the heap.
func (m *predictionMeta) clone() *predictionMeta {
	return &predictionMeta{
		predictedAt: bytes.Clone(m.predictedAt),
		objective:   strings.Clone(m.objective),
		quantile:    bytes.Clone(m.quantile),
		lastLoad:    strings.Clone(m.lastLoad),
	}
}

// appendPredictionList writes preds, comma-separated.
func appendPredictionList(dst []byte, preds []predictor.Prediction, meta *predictionMeta) []byte {
	for i := range preds {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendPrediction(dst, &preds[i], meta)
	}
	return dst
}

// appendPrediction writes one prediction object.
func appendPrediction(dst []byte, p *predictor.Prediction, meta *predictionMeta) []byte {
	dst = append(dst, `{"ttft_ms":`...)
	dst = appendFloat(dst, p.TTFTMs)
	dst = append(dst, `,"tpot_ms":`...)
	dst = appendFloat(dst, p.TPOTMs)
	dst = append(dst, `,"ttft_uncertainty":`...)
	dst = appendFloat(dst, p.TTFTUncertainty)
	dst = append(dst, `,"tpot_uncertainty":`...)
	dst = appendFloat(dst, p.TPOTUncertainty)
	dst = append(dst, `,"ttft_prediction_bounds":[`...)
	dst = appendFloat(dst, p.TTFTBounds[0])
	dst = append(dst, ',')
	dst = appendFloat(dst, p.TTFTBounds[1])
	dst = append(dst, `],"tpot_prediction_bounds":[`...)
	dst = appendFloat(dst, p.TPOTBounds[0])
	dst = append(dst, ',')
	dst = appendFloat(dst, p.TPOTBounds[1])
	dst = append(dst, `],"predicted_at":"`...)
	dst = append(dst, meta.predictedAt...)
	dst = append(dst, `","model_type":"`+modelTypeXGBoost+`","objective_type":"`...)
	dst = append(dst, meta.objective...)
	dst = append(dst, `","quantile":`...)
	dst = append(dst, meta.quantile...)
	dst = append(dst, `,"last_model_load":"`...)
	dst = append(dst, meta.lastLoad...)
	return append(dst, `"}`...)
}

// appendFloat writes the shortest JSON number that reads back as v; a
// non-finite value, which the models never produce, is written as 0 rather
// than as invalid JSON.
func appendFloat(dst []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(dst, '0')
	}
	return strconv.AppendFloat(dst, v, 'f', -1, 64)
}
