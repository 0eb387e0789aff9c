package plugins

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchAnswer is a matrix answer for nP prefill × nD decode candidates as
// Headroom writes it: integers for ranks, milliseconds to the microsecond.
func benchAnswer(nP, nD int) []byte {
	var b strings.Builder
	row := func(f func(i, j int) string, j int) string {
		var cells []string
		for i := range nP {
			cells = append(cells, f(i, j))
		}
		return "[" + strings.Join(cells, ",") + "]"
	}
	rows := func(f func(i, j int) string) string {
		var out []string
		for j := range nD {
			out = append(out, row(f, j))
		}
		return "[" + strings.Join(out, ",") + "]"
	}
	column := func(f func(j int) string) string {
		var out []string
		for j := range nD {
			out = append(out, f(j))
		}
		return "[" + strings.Join(out, ",") + "]"
	}
	flags := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat("false,", n), ",") + "]" }
	fmt.Fprintf(&b, `{"split":true,"best":{"prefill_pod":"llm-d/prefill-3","decode_pod":"llm-d/decode-5","rank":0,"ttft_ms":181.204},"ranked_by":"ttft",`)
	fmt.Fprintf(&b, `"matrix":{"rank":%s,"ttft_ms":%s,"no_split_rank":%s,"no_split_ttft_ms":%s,"tpot_ms":%s,"prefill_extrapolated":%s,"decode_extrapolated":%s},`,
		rows(func(i, j int) string { return fmt.Sprint(i*nD + j) }),
		rows(func(i, j int) string { return fmt.Sprintf("%.3f", 180+float64(i*nD+j)*1.237) }),
		column(func(j int) string { return fmt.Sprint(nP*nD + j) }),
		column(func(j int) string { return fmt.Sprintf("%.3f", 900+float64(j)*3.1) }),
		column(func(j int) string { return fmt.Sprintf("%.3f", 20+float64(j)*0.51) }),
		flags(nP), flags(nD))
	fmt.Fprintf(&b, `"total_pairs":%d,"unknown_transfer_pairs":0,"kv_transfer_model":true,"model_version":3,"predicted_at":"2026-12-02T02:41:22.483162Z","processing_time_ms":0.214}`, nP*nD)
	if !json.Valid([]byte(b.String())) {
		panic("benchAnswer: invalid JSON")
	}
	return []byte(b.String())
}

func BenchmarkDecodeAnswer(b *testing.B) {
	body := benchAnswer(16, 16)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var a pairsAnswer
		if err := decodeAnswer(body, 16, 16, &a); err != nil {
			b.Fatal(err)
		}
	}
}
