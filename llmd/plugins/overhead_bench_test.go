package plugins_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// benchFleet is 16 prefill and 16 decode pods over two zones of four racks
// of two nodes each, with a busy pool's loads.
func benchFleet() []pod {
	var out []pod
	for _, role := range []string{"prefill", "decode"} {
		for i := range 16 {
			out = append(out, pod{name: fmt.Sprintf("%s-%d", role, i), role: role,
				node: fmt.Sprintf("%s-n%d", role, i/2), rack: fmt.Sprintf("r%d", i/4), zone: fmt.Sprintf("z%d", i/8),
				waiting: i % 3, running: 2 + i%9, kv: float64(i%10) / 10})
		}
	}
	return out
}

// BenchmarkSchedulingOverhead is what the Headroom plugins add to one
// scheduling decision of llm-d's scheduler, 16 prefill × 16 decode
// candidates, the predictor on the same host (a Headroom started by the
// benchmark, its models trained on the synthetic pool: trees when the
// xgboost CLI is installed, else lines): the wall time of one decision
// (data producers, both profiles, the PreRequest hooks) with the shipped
// config, against llm-d's P/D config without the plugins. It prints the
// p50 and p99 of each and of the difference of the p99s.
func BenchmarkSchedulingOverhead(b *testing.B) {
	_, err := exec.LookPath("xgboost")
	trees := err == nil
	h := startHeadroomWith(b, trees)
	h.train(b, trainingSamples(400, 3))
	if trees {
		h.waitForTrees(b)
	}
	b.Logf("models: trees %v", trees)
	fleet := benchFleet()
	ctx := context.Background()
	lat := map[string][]time.Duration{}
	for _, c := range []struct{ name, path string }{{"headroom", shippedConfig}, {"llm-d", stockConfig}} {
		r := newRouter(b, readConfig(b, c.path), h.predictor, "")
		eps := endpoints(fleet)
		// Warm the connections and the prefix producer's index.
		for n := range 20 {
			if _, err := r.Schedule(ctx, request(fmt.Sprintf("warm-%d", n), 3000, uint32(n), nil), eps); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(c.name, func(b *testing.B) {
			var d []time.Duration
			n := 0
			for b.Loop() {
				req := request(fmt.Sprintf("%s-%d", c.name, n), 3000, uint32(1000+n), nil)
				start := time.Now()
				if _, err := r.Schedule(ctx, req, eps); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(start))
				n++
			}
			lat[c.name] = append(lat[c.name], d...)
			b.ReportMetric(ms(quantile(d, 0.5)), "p50-ms")
			b.ReportMetric(ms(quantile(d, 0.99)), "p99-ms")
		})
	}
	if len(lat["headroom"]) > 0 && len(lat["llm-d"]) > 0 {
		b.Logf("16 x 16: headroom p50 %.3f p99 %.3f ms, llm-d p50 %.3f p99 %.3f ms: the plugins add %.3f ms at p99",
			ms(quantile(lat["headroom"], 0.5)), ms(quantile(lat["headroom"], 0.99)),
			ms(quantile(lat["llm-d"], 0.5)), ms(quantile(lat["llm-d"], 0.99)),
			ms(quantile(lat["headroom"], 0.99))-ms(quantile(lat["llm-d"], 0.99)))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
