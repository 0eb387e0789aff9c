package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/wire"
)

// Client speaks to Headroom the way llm-d's router does: over HTTP, with
// bodies in the router's shape written by package wire's request encoders
// (which a round-trip test holds to the servers' decoders), so the demo
// exercises the same decoding a real router's requests go through.
type Client struct {
	TrainerURL   string // e.g. http://127.0.0.1:8000
	PredictorURL string // e.g. http://127.0.0.1:8001
	HTTP         *http.Client
}

// ErrNotReady is the predictor's 503 before its first model: llm-d's router
// then falls back to its composite scorer.
var ErrNotReady = errors.New("predictor: models not ready")

// predictRow is the row the router sends for a candidate: its dispatch-time
// features with num_tokens_generated 1, as llm-d always sends (docs/PROTOCOL.md §3).
func predictRow(r features.Row) features.Row {
	r.NumTokensGenerated = 1
	return r
}

// Prediction is the part of a prediction the router acts on.
type Prediction struct {
	TTFTMs float64 `json:"ttft_ms"`
	TPOTMs float64 `json:"tpot_ms"`
}

// Predict asks POST /predict/bulk/strict for one prediction per row, in
// order. It returns ErrNotReady (wrapped) on 503.
func (c *Client) Predict(ctx context.Context, rows []features.Row) ([]Prediction, error) {
	var resp struct {
		Predictions []Prediction `json:"predictions"`
	}
	if err := c.post(ctx, c.PredictorURL+"/predict/bulk/strict", wire.AppendPredictRequest(nil, rows), http.StatusOK, &resp); err != nil {
		return nil, err
	}
	if len(resp.Predictions) != len(rows) {
		return nil, fmt.Errorf("predict: %d predictions for %d rows", len(resp.Predictions), len(rows))
	}
	return resp.Predictions, nil
}

// AddTrainingData posts entries to POST /add_training_data_bulk and
// returns how many the trainer accepted. Headroom acknowledges only what
// it stored durably, so a nil error means the samples are in.
func (c *Client) AddTrainingData(ctx context.Context, entries []features.Sample) (int, error) {
	var resp struct {
		Accepted int `json:"accepted"`
	}
	if err := c.post(ctx, c.TrainerURL+"/add_training_data_bulk", wire.AppendTrainingRequest(nil, entries), http.StatusAccepted, &resp); err != nil {
		return 0, err
	}
	return resp.Accepted, nil
}

// ModelInfo is the part of GET /model/info the demo reports.
type ModelInfo struct {
	Version uint64     `json:"version"`
	TTFT    TargetInfo `json:"ttft"`
	TPOT    TargetInfo `json:"tpot"`
	// Transfer is the KV-transfer target; not ready when the trainer has
	// seen no transfer.
	Transfer TargetInfo `json:"kv_transfer"`
}

// TargetInfo is one target's model in a ModelInfo.
type TargetInfo struct {
	Ready          bool   `json:"ready"`
	Kind           string `json:"kind"`
	TrainSamples   int    `json:"train_samples"`   // in the store now
	HoldoutSamples int    `json:"holdout_samples"` // in the store now
	TrainedOn      int    `json:"trained_on_samples"`
	Holdout        struct {
		Rows int     `json:"rows"`
		MAPE float64 `json:"mape"` // percent
	} `json:"holdout"`
}

// ModelInfo reads the trainer's GET /model/info.
func (c *Client) ModelInfo(ctx context.Context) (ModelInfo, error) {
	var info ModelInfo
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.TrainerURL+"/model/info", nil)
	if err != nil {
		return info, fmt.Errorf("model info: %w", err)
	}
	return info, c.do(req, http.StatusOK, &info)
}

func (c *Client) post(ctx context.Context, url string, body []byte, want int, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("post %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req, want, out)
}

func (c *Client) do(req *http.Request, want int, out any) error {
	return doJSON(c.HTTP, req, want, out)
}

// doJSON sends req with client (nil: http.DefaultClient) and decodes the
// answer into out (nil: none expected), an error unless its status is want:
// the one round trip of every JSON client of the demo (Headroom's servers,
// the sim-scheduler).
func doJSON(client *http.Client, req *http.Request, want int, out any) error {
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode == http.StatusServiceUnavailable && strings.HasPrefix(req.URL.Path, "/predict") {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, ErrNotReady)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d: %s", req.Method, req.URL.Path, resp.StatusCode, bytes.TrimSpace(data[:min(len(data), 512)]))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode: %w", req.Method, req.URL.Path, err)
	}
	return nil
}
