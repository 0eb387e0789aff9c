package plugins_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/headroomhq/headroom/llmd/plugins"
)

// manualClock is a clock a test moves.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// realFleet spreads three prefill and three decode pods over two zones as
// the synthetic pool's placements: pairs of every link class compete.
var realFleet = []pod{
	{name: "p-idle-far", role: "prefill", node: "b1", rack: "r9", zone: "zb"},
	{name: "p-busy-near", role: "prefill", node: "a2", rack: "r1", zone: "za", waiting: 1},
	{name: "p-zone", role: "prefill", node: "a3", rack: "r2", zone: "za", waiting: 2},
	{name: "d-calm", role: "decode", node: "a1", rack: "r1", zone: "za", running: 3},
	{name: "d-busy", role: "decode", node: "b2", rack: "r9", zone: "zb", waiting: 1, running: 12},
	{name: "d-other", role: "decode", node: "a4", rack: "r2", zone: "za", running: 6},
}

// option is one option of the predictor's list answer.
type option struct {
	Prefill *string `json:"prefill_pod"`
	Decode  string  `json:"decode_pod"`
	TTFT    float64 `json:"ttft_ms"`
}

// listAnswer asks the predictor the producer's own question, for the lists.
func listAnswer(t testing.TB, predictor string, body []byte) (best option, pairs []option) {
	t.Helper()
	body = bytes.Replace(body, []byte(`"matrix":true`), []byte(`"matrix":false`), 1)
	resp, err := http.Post(predictor+"/predict/pairs", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		Best  option   `json:"best"`
		Pairs []option `json:"pairs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != 200 || len(a.Pairs) == 0 {
		t.Fatalf("%d %v %+v", resp.StatusCode, err, a)
	}
	return a.Best, a.Pairs
}

func name(s *string) string {
	if s == nil {
		return ""
	}
	return short(*s)
}

func TestAgainstHeadroom(t *testing.T) {
	h := startHeadroom(t)
	h.train(t, trainingSamples(300, 7))
	predictor := newRecordingProxy(t, h.predictor)
	trainer := newRecordingProxy(t, h.trainer)
	ctx := context.Background()

	for _, tt := range []struct {
		name   string
		config []byte
	}{{"the decider splits", shipped(t)}, {"headroom decides the split", splitConfig(t)}} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRouter(t, tt.config, predictor.URL, trainer.URL)
			clock := &manualClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
			p := r.Producer(plugins.ProducerType)
			p.SetClock(clock)
			for n, tokens := range []int{3000, 600, 40} {
				req := request("req", tokens, uint32(10+n), nil)
				res, err := r.Schedule(ctx, req, endpoints(realFleet))
				if err != nil {
					t.Fatal(err)
				}
				body, _ := predictor.last(t)
				best, pairs := listAnswer(t, h.predictor, body)
				d, pf := picks(t, res)
				t.Logf("%d tokens: picked (%s, %s); best (%s, %s) %.1f ms", tokens, pf, d, name(best.Prefill), short(best.Decode), best.TTFT)
				want := pairs[0] // the decider splits every request (>= 16 uncached tokens)
				if tt.name == "headroom decides the split" {
					want = best
				}
				if d != short(want.Decode) || pf != name(want.Prefill) {
					t.Errorf("%d tokens: picked (%s, %s), the predicted best is (%s, %s)", tokens, pf, d, name(want.Prefill), short(want.Decode))
				}

				// What the EPP saw goes to the trainer: 250 ms to the end of
				// the (non-streamed) response.
				clock.advance(250 * time.Millisecond)
				respond(ctx, r, req, res)
				if err := p.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				sent, code := trainer.last(t)
				if code != http.StatusAccepted {
					t.Fatalf("trainer answered %d to %s", code, sent)
				}
				var batch struct {
					Entries []map[string]any `json:"entries"`
				}
				if err := json.Unmarshal(sent, &batch); err != nil || len(batch.Entries) != 1 {
					t.Fatalf("batch %s: %v", sent, err)
				}
				e := batch.Entries[0]
				if e["actual_ttft_ms"] != 250.0 || e["input_token_length"] != float64(tokens) {
					t.Errorf("entry %v", e)
				}
				if pf == "" {
					if e["pod_type"] != "decode" || e["prefill_topology"] != nil {
						t.Errorf("unsplit request's entry %v", e)
					}
					continue
				}
				// A split request's TTFT entry is the prefill pod's row with
				// both placements and the tokens that move, but no transfer
				// time: llm-d does not measure it.
				if e["pod_type"] != "prefill" || short(e["prefill_pod"].(string)) != pf || short(e["decode_pod"].(string)) != d ||
					e["prefill_topology"] == nil || e["decode_topology"] == nil || e["kv_transfer_tokens"] == nil ||
					e["actual_kv_transfer_ms"] != nil || e["concurrent_transfers"] != 1.0 {
					t.Errorf("split request's entry %v", e)
				}
				// Its row is the one sent for the prefill pod, its placements
				// both pods', and every prompt token moves (no prefix match).
				byName := map[string]pod{}
				for _, p := range realFleet {
					byName[p.name] = p
				}
				prefillPod, decodePod := byName[pf], byName[d]
				pt, _ := e["prefill_topology"].(map[string]any)
				dt, _ := e["decode_topology"].(map[string]any)
				if e["num_request_waiting"] != float64(prefillPod.waiting) || pt["node"] != prefillPod.node || pt["zone"] != prefillPod.zone ||
					dt["node"] != decodePod.node || dt["rack"] != decodePod.rack || e["kv_transfer_tokens"] != float64(tokens) {
					t.Errorf("split request's entry %v: want the rows and placements of %+v and %+v", e, prefillPod, decodePod)
				}
			}
		})
	}
}
