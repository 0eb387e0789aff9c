package api

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
)

// benchPairsBody is a /predict/pairs body of nP prefill and nD decode
// candidates of a busy pool spread over two regions, three zones and
// racks of two nodes, as a router would send it.
func benchPairsBody(nP, nD int) []byte {
	r := rand.New(rand.NewPCG(15, uint64(nP*nD)))
	list := func(role string, n int) string {
		var cs []string
		for i := range n {
			region := "eu"
			if i%8 == 7 {
				region = "us"
			}
			cs = append(cs, fmt.Sprintf(`{"pod":"%s-%d","topology":{"node":"%s-node-%d","rack":"rack-%d","zone":"%s-%d","region":%q},`+
				`"kv_cache_percentage":%.3f,"num_request_waiting":%d,"num_request_running":%d,"prefix_cache_score":%.4f,`+
				`"pod_type":%q,"prefill_tokens_in_flight":%d,"decode_tokens_in_flight":%d}`,
				role, i, role, i, i/2, region, i%3, region, r.Float64()*0.9, r.IntN(4), 1+r.IntN(48), float64(r.IntN(64))/64,
				role, r.IntN(20000), r.IntN(40000)))
		}
		return "[" + strings.Join(cs, ",") + "]"
	}
	return []byte(`{"input_token_length":3000,"num_tokens_generated":1,"ttft_slo_ms":800,"tpot_slo_ms":60,` +
		`"prefill":` + list("prefill", nP) + `,"decode":` + list("decode", nD) + `}`)
}

// BenchmarkPredictPairsHandler is the whole /predict/pairs handler in
// process, without the network: routing, metrics, body read, decode,
// P + 2·D estimates with 200-tree models of depth 6 for both targets,
// P·D transfer estimates, ranking, and encoding every option. One op is
// one request. The target is 16 × 16 in ≤ 1 ms of CPU.
func BenchmarkPredictPairsHandler(b *testing.B) {
	p := benchPredictor(b)
	withTransfer(b, p, pairsTransferModel(b))
	h := NewPredictorHandler(p, PredictorOptions{})
	for _, c := range []struct {
		n      int
		matrix bool
	}{{4, false}, {16, false}, {64, false}, {16, true}, {64, true}} {
		body, name := benchPairsBody(c.n, c.n), fmt.Sprintf("%dx%d", c.n, c.n)
		if c.matrix {
			// What a router scoring each pod asks for (llmd/plugins).
			body, name = bytes.Replace(body, []byte(`{"input_token_length"`), []byte(`{"matrix":true,"input_token_length"`), 1), name+"-matrix"
		}
		b.Run(name, func(b *testing.B) {
			rd := bytes.NewReader(body)
			req, err := http.NewRequest(http.MethodPost, "/predict/pairs", nil)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.RemoteAddr = "127.0.0.1:40000" // a real request has one; the bounds per client read it
			nop := io.NopCloser(rd)
			req.ContentLength = int64(len(body))
			w := &discard{header: http.Header{}}
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				rd.Reset(body)
				req.Body = nop // the handler wraps the body it reads (bounds on arriving bytes)
				clear(w.header)
				w.status, w.n = 0, 0
				h.ServeHTTP(w, req)
				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(w.n), "resp-bytes")
		})
	}
}
