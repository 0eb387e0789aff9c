package plugins

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/pairs"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/wire"
)

// ranker ranks one request's pairs into a matrix answer. Two instances:
// client, which asks a predictor over HTTP (/predict/pairs), and
// localRanker, which ranks in the EPP's own process on the bundles it
// follows from the trainer, as a predictor does. Both answer errNoModel
// before a bundle can rank pairs.
type ranker interface {
	rankPairs(ctx context.Context, req *pairsRequest, out *pairsAnswer) error
}

// localRanker ranks pairs in the EPP's process: a predictor.Predictor kept
// up to date by a predictor.Syncer long-polling the trainer (the bundles
// verified against the signing key, as a predictor verifies them), and
// pairs.Rank on its bundle, the code a predictor's /predict/pairs runs. It
// saves the loopback hop, the predictor's wake-ups and the encoding and
// decoding of both messages: what a scheduling decision's tail is made of
// when the predictor is another process. It is safe for concurrent use.
type localRanker struct {
	pred   *predictor.Predictor
	syncer *predictor.Syncer
	// rankings recycles *localRanking: a ranking's slices are reused by the
	// next Rank into the same Result, and its request's by the next
	// request.
	rankings sync.Pool
}

// localRanking is one Rank's request and result, reused whole.
type localRanking struct {
	req wire.PairsRequest
	res pairs.Result
}

// newLocalRanker follows trainer's bundles (refusing any not signed with
// key, when key is set), every interval besides the long poll, predicting
// the objective at quantile q. Its syncs and the bundle in service are a
// predictor's series (headroom_predictor_bundle_*), registered with reg.
func newLocalRanker(trainer string, key []byte, interval time.Duration, objective predictor.Objective, q float64, reg prometheus.Registerer, log *slog.Logger) (*localRanker, error) {
	pred, err := predictor.New(objective, q)
	if err != nil {
		return nil, err
	}
	m := predictor.NewMetrics(keepFirst{reg})
	m.WatchAge(pred)
	return &localRanker{pred: pred, syncer: &predictor.Syncer{
		TrainerURL: trainer, Interval: interval, SigningKey: key, Predictor: pred, Logger: log, Metrics: m,
		Client: &http.Client{Timeout: 10 * time.Second},
	}}, nil
}

// start follows the trainer's bundles until ctx ends.
func (l *localRanker) start(ctx context.Context) { go l.syncer.Run(ctx) }

// rankPairs ranks req on the bundle in hand. Ranking is computation only,
// bounded by the candidates' count (wire.DefaultMaxPairCandidates of each
// role, the predictor's limit), so ctx is checked before it, not during.
func (l *localRanker) rankPairs(ctx context.Context, req *pairsRequest, out *pairsAnswer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if n := max(len(req.Prefill), len(req.Decode)); n > wire.DefaultMaxPairCandidates {
		return fmt.Errorf("headroom: %d candidates of one role, more than the %d a ranking takes", n, wire.DefaultMaxPairCandidates)
	}
	pub, _ := l.pred.Current()
	if pub == nil {
		return fmt.Errorf("%w (in process: no bundle from %s yet)", errNoModel, predictor.RedactedURL(l.syncer.TrainerURL))
	}
	models := pairs.FromBundle(pub.Bundle, l.pred.Statistic())
	r, _ := l.rankings.Get().(*localRanking)
	if r == nil {
		r = new(localRanking)
	}
	defer l.rankings.Put(r)
	wirePairsRequest(req, &r.req)
	if err := pairs.Rank(&models, &r.req, &r.res); err != nil {
		if errors.Is(err, pairs.ErrNotReady) {
			return fmt.Errorf("%w (in process: %v)", errNoModel, err)
		}
		return fmt.Errorf("headroom: rank pairs in process: %w", err)
	}
	matrixAnswer(&r.res.PairsRanking, len(req.Prefill), out)
	return nil
}

// wirePairsRequest writes req into w as pairs.Rank reads it, the request
// the predictor decodes from req's encoding (encode.go), reusing w's
// candidate slices.
func wirePairsRequest(req *pairsRequest, w *wire.PairsRequest) {
	*w = wire.PairsRequest{
		InputTokenLength: req.InputTokenLength, KVBytesPerToken: req.KVBytesPerToken,
		TTFTSLOMs: req.TTFTSLOMs, TPOTSLOMs: req.TPOTSLOMs, Matrix: true,
		Prefill: w.Prefill[:0], Decode: w.Decode[:0],
	}
	for i := range req.Prefill {
		w.Prefill = append(w.Prefill, wireCandidate(&req.Prefill[i]))
	}
	for j := range req.Decode {
		w.Decode = append(w.Decode, wireCandidate(&req.Decode[j]))
	}
}

func wireCandidate(c *pairCandidate) wire.PairCandidate {
	return wire.PairCandidate{
		Pod:      c.Pod,
		Topology: features.Topology{Node: c.Topology.Node, Rack: c.Topology.Rack, Zone: c.Topology.Zone, Region: c.Topology.Region},
		Row: features.Row{
			KVCachePercentage: c.KVCachePercentage, NumRequestWaiting: c.NumRequestWaiting,
			NumRequestRunning: c.NumRequestRunning, PrefixCacheScore: c.PrefixCacheScore, PodType: c.PodType,
			PrefillTokensInFlight: c.PrefillTokensInFlight,
		},
		// The transfers on the pod's link when this one starts, itself
		// included, as the predictor reads kv_transfers_in_flight.
		Concurrent: c.KVTransfersInFlight + 1,
	}
}

// matrixAnswer writes r, a ranking of nP prefill candidates, into out as
// the matrix answer the predictor writes (wire.AppendPairsResponse): rows
// are decode candidates, columns prefill candidates, a pair without an
// estimate rank -1 and TTFT 0, as decodeAnswer reads a null.
func matrixAnswer(r *wire.PairsRanking, nP int, out *pairsAnswer) {
	nD := len(r.EveryNoSplit)
	m := &out.Matrix
	out.Split, out.KVTransferModel = r.Best.Split(), r.TransferModel
	rank, ttft := make([]int, nP*nD), make([]float64, nP*nD)
	ends := make([]int, nD)
	m.NoSplitRank, m.NoSplitTTFTMs, m.TPOTMs = make([]int, nD), make([]float64, nD), make([]float64, nD)
	m.DecodeExtrapolated = make([]bool, nD)
	for j := range nD {
		for i := range nP {
			cell := j*nP + i
			rank[cell] = -1
			if at := r.PairAt[cell]; at >= 0 {
				rank[cell], ttft[cell] = r.EveryPair[at].Rank, r.EveryPair[at].TTFT.Ms
			}
		}
		ends[j] = (j + 1) * nP
		alone := &r.EveryNoSplit[j]
		m.NoSplitRank[j], m.NoSplitTTFTMs[j], m.TPOTMs[j], m.DecodeExtrapolated[j] = alone.Rank, alone.TTFT.Ms, alone.TPOT.Ms, alone.Extrapolated
	}
	m.Rank, m.TTFTMs = split(rank, ends), split(ttft, ends)
	m.PrefillExtrapolated = append([]bool(nil), r.PrefillExtrapolated[:nP]...)
}
