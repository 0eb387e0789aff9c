package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The wire types below are the parts of Headroom's protocol the plugins
// use (docs/PROTOCOL.md §4.7 and §5.1), with its field names: what the
// producer keeps of a request and encodes by hand (encode.go), one
// allocation-free copy for both rankers; the in-process ranker converts
// it to package wire's (local.go).

// pairsRequest is a POST /predict/pairs body asking for the matrix answer.
type pairsRequest struct {
	InputTokenLength int64           `json:"input_token_length"`
	KVBytesPerToken  float64         `json:"kv_bytes_per_token,omitempty"`
	TTFTSLOMs        float64         `json:"ttft_slo_ms,omitempty"`
	TPOTSLOMs        float64         `json:"tpot_slo_ms,omitempty"`
	Matrix           bool            `json:"matrix"`
	Prefill          []pairCandidate `json:"prefill"`
	Decode           []pairCandidate `json:"decode"`
}

// pairCandidate is one pod of a pairs request: a bulk row's pod fields,
// its name and topology, and the KV transfers already on its link.
type pairCandidate struct {
	Pod                   string   `json:"pod"`
	Topology              topology `json:"topology"`
	KVCachePercentage     float64  `json:"kv_cache_percentage"`
	NumRequestWaiting     int64    `json:"num_request_waiting"`
	NumRequestRunning     int64    `json:"num_request_running"`
	PrefixCacheScore      float64  `json:"prefix_cache_score"`
	PodType               string   `json:"pod_type,omitempty"`
	PrefillTokensInFlight int64    `json:"prefill_tokens_in_flight"`
	KVTransfersInFlight   int64    `json:"kv_transfers_in_flight"`
}

// topology is a pod's placement; empty labels are left out, as Headroom
// requires of samples and pair candidates alike.
type topology struct {
	Node   string `json:"node"`
	Rack   string `json:"rack,omitempty"`
	Zone   string `json:"zone,omitempty"`
	Region string `json:"region,omitempty"`
}

// pairsAnswer is the matrix answer (decodeAnswer): rows are decode
// candidates, columns prefill candidates; a pair without an estimate (null)
// has rank -1 and TTFT 0.
type pairsAnswer struct {
	Split  bool
	Matrix struct {
		Rank                [][]int
		TTFTMs              [][]float64
		NoSplitRank         []int
		NoSplitTTFTMs       []float64
		TPOTMs              []float64
		PrefillExtrapolated []bool
		DecodeExtrapolated  []bool
	}
	KVTransferModel bool
}

// trainingEntry is one entry of POST /add_training_data_bulk with
// Headroom's P/D fields (§5.1): a split request's TTFT entry carries both
// pods and their topology, and the transfer when the deployment measured it.
type trainingEntry struct {
	KVCachePercentage     float64   `json:"kv_cache_percentage"`
	InputTokenLength      int64     `json:"input_token_length"`
	NumRequestWaiting     int64     `json:"num_request_waiting"`
	NumRequestRunning     int64     `json:"num_request_running"`
	NumTokensGenerated    int64     `json:"num_tokens_generated"`
	PrefixCacheScore      float64   `json:"prefix_cache_score"`
	PodType               string    `json:"pod_type,omitempty"`
	PrefillTokensInFlight int64     `json:"prefill_tokens_in_flight"`
	ActualTTFTMs          float64   `json:"actual_ttft_ms"`
	ActualTPOTMs          float64   `json:"actual_tpot_ms"`
	PredictedTTFTMs       float64   `json:"predicted_ttft_ms,omitempty"`
	Timestamp             time.Time `json:"timestamp"`
	ActualKVTransferMs    float64   `json:"actual_kv_transfer_ms,omitempty"`
	KVTransferTokens      int64     `json:"kv_transfer_tokens,omitempty"`
	KVBytesPerToken       float64   `json:"kv_bytes_per_token,omitempty"`
	PrefillPod            string    `json:"prefill_pod,omitempty"`
	DecodePod             string    `json:"decode_pod,omitempty"`
	PrefillTopology       *topology `json:"prefill_topology,omitempty"`
	DecodeTopology        *topology `json:"decode_topology,omitempty"`
	ConcurrentTransfers   int64     `json:"concurrent_transfers,omitempty"`
}

// errNoModel is the predictor's 503 before its bundle has the models a
// pair ranking needs.
var errNoModel = errors.New("headroom: no model yet")

// client speaks to Headroom's servers. It is safe for concurrent use.
type client struct {
	predictors []string // base URLs, tried in turn per call
	// direct[i] are the connections to predictors[i] for /predict/pairs,
	// nil where net/http makes the call (conns.go).
	direct  []*conns
	trainer string
	http    *http.Client
	next    atomic.Uint64
	// buffers recycles the buffers (*[]byte) requests are encoded into
	// and answers read into: an answer is decoded, then dropped; a request
	// is written, then dropped, once sent directly (net/http may still
	// write a body after its answer has come).
	buffers sync.Pool
}

// connBuffer is each predictor connection's read buffer (and the
// transport's write buffer): a 16 × 16 pairs request (9 KB) goes out in one
// system call and its answer comes in in one, where the transport's 4 KB
// default wrote a request in three, each a wake-up of the predictor's
// reader, and read an answer in two.
const connBuffer = 64 << 10

// maxBuffer is the largest buffer kept for reuse: a 64 × 64 matrix
// answer's size.
const maxBuffer = 256 << 10

func newClient(predictors []string, trainer string) *client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// One EPP sends every scheduling cycle's call to the same few
	// predictors: keep enough idle connections that a burst does not
	// open new ones.
	t.MaxIdleConnsPerHost = 64
	t.WriteBufferSize, t.ReadBufferSize = connBuffer, connBuffer
	c := &client{predictors: predictors, trainer: trainer, http: &http.Client{Transport: t}}
	for _, base := range predictors {
		c.direct = append(c.direct, newConns(base, pairsPath, t.Proxy))
	}
	return c
}

const pairsPath = "/predict/pairs"

// rankPairs asks a predictor to rank req's pairs. ctx bounds the call.
func (c *client) rankPairs(ctx context.Context, req *pairsRequest, out *pairsAnswer) error {
	if len(c.predictors) == 0 {
		return errors.New("headroom: no predictor URL configured")
	}
	n := int(c.next.Add(1) % uint64(len(c.predictors)))
	base := c.predictors[n]
	reqBuf := c.buffer()
	body, err := appendPairsRequest((*reqBuf)[:0], req)
	*reqBuf = body
	if c.direct[n] != nil {
		defer c.recycle(reqBuf)
	}
	if err != nil {
		return fmt.Errorf("headroom: %w", err)
	}
	buf := c.buffer()
	defer c.recycle(buf)
	status, data, err := c.postPairs(ctx, n, body, (*buf)[:0], answerLimit(len(req.Prefill), len(req.Decode)))
	*buf = data
	if err != nil {
		return err
	}
	switch status {
	case http.StatusOK:
	case http.StatusServiceUnavailable:
		return fmt.Errorf("%w (%s: %s)", errNoModel, base, bytes.TrimSpace(data))
	default:
		return fmt.Errorf("headroom: %s/predict/pairs answered %d: %s", base, status, bytes.TrimSpace(data))
	}
	if err := decodeAnswer(data, len(req.Prefill), len(req.Decode), out); err != nil {
		return fmt.Errorf("headroom: decode the answer of %s: %w", base, err)
	}
	return nil
}

func (c *client) buffer() *[]byte {
	if b, ok := c.buffers.Get().(*[]byte); ok {
		return b
	}
	return new([]byte)
}

func (c *client) recycle(b *[]byte) {
	if cap(*b) <= maxBuffer {
		c.buffers.Put(b)
	}
}

// postPairs posts body to predictor n's /predict/pairs and appends the
// answer's body, at most limit bytes, to dst.
func (c *client) postPairs(ctx context.Context, n int, body, dst []byte, limit int) (status int, data []byte, err error) {
	base := c.predictors[n]
	if d := c.direct[n]; d != nil {
		status, data, err = d.post(ctx, body, dst, limit)
		if err != nil {
			return 0, data, fmt.Errorf("headroom: %s%s: %w", base, pairsPath, err)
		}
		return status, data, nil
	}
	resp, err := c.post(ctx, base+pairsPath, body)
	if err != nil {
		return 0, dst, err
	}
	defer resp.Body.Close()
	if data, err = readBody(resp, dst, limit); err != nil {
		return 0, data, fmt.Errorf("headroom: read pairs answer from %s: %w", base, err)
	}
	return resp.StatusCode, data, nil
}

// answerLimit is the most bytes a matrix answer for nP prefill and nD
// decode candidates may take: every cell at its encoded bound, and room
// for the rest of the answer. A predictor answering more is broken or not
// Headroom's: the call fails rather than the EPP holding what it sends
// until the deadline.
func answerLimit(nP, nD int) int {
	return answerOverhead + (nP+2)*nD*matrixCellBytes
}

const (
	// matrixCellBytes bounds one pair of a matrix answer as encoded: its
	// rank and its TTFT, which the predictor writes to the microsecond,
	// with their separators (the predictor budgets its memory by the same
	// bound).
	matrixCellBytes = 32
	// answerOverhead is a matrix answer's room for its fixed fields and the
	// per-candidate lists, and an error answer's detail.
	answerOverhead = 64 << 10
)

// errAnswerTooLarge is an answer longer than its request's answerLimit.
var errAnswerTooLarge = errors.New("answer larger than a matrix answer for the request can be")

// readBody appends resp's body to dst, growing it once to the declared
// length (io.ReadAll grows from 512 bytes, copying as it goes); a body of
// more than limit bytes is errAnswerTooLarge, read no further.
func readBody(resp *http.Response, dst []byte, limit int) ([]byte, error) {
	if n := resp.ContentLength; n > int64(limit) {
		return dst, fmt.Errorf("%w: %d bytes declared, at most %d", errAnswerTooLarge, n, limit)
	} else if n > 0 && n <= maxBuffer {
		dst = slices.Grow(dst, int(n)+1) // +1: room to see the end without growing
	}
	start := len(dst)
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		room := min(cap(dst), start+limit+1) // one byte past the limit shows it exceeded
		n, err := resp.Body.Read(dst[len(dst):room])
		dst = dst[:len(dst)+n]
		if len(dst)-start > limit {
			return dst, fmt.Errorf("%w: more than %d bytes", errAnswerTooLarge, limit)
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// addTrainingData posts entries to the trainer; it succeeds only on 202,
// when Headroom has them on disk.
func (c *client) addTrainingData(ctx context.Context, entries []trainingEntry) error {
	if c.trainer == "" {
		return errors.New("headroom: no trainer URL configured")
	}
	body, err := json.Marshal(struct {
		Entries []trainingEntry `json:"entries"`
	}{entries})
	if err != nil {
		return fmt.Errorf("headroom: encode %d training entries: %w", len(entries), err)
	}
	resp, err := c.post(ctx, c.trainer+"/add_training_data_bulk", body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("headroom: %s/add_training_data_bulk answered %d: %s", c.trainer, resp.StatusCode, bytes.TrimSpace(data))
	}
	return nil
}

func (c *client) post(ctx context.Context, url string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("headroom: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("headroom: %w", err)
	}
	return resp, nil
}

// splitURLs reads a comma-separated list of base URLs, as llm-d's
// PREDICTION_SERVER_URL holds them.
func splitURLs(list string) []string {
	var out []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			out = append(out, u)
		}
	}
	return out
}
