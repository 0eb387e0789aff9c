package plugins

import (
	"reflect"
	"strings"
	"testing"
)

func TestDecodeAnswer(t *testing.T) {
	// PROTOCOL.md §4.7's matrix example, with the fields the plugins do not
	// read, nested and escaped, around them.
	body := `{"split":true,"best":{"prefill_pod":"p-\"0\"","decode_pod":"d-0","rank":0,"ttft_ms":90,"ttft_prediction_bounds":[1,2.5e1]},"ranked_by":"ttft",
 "matrix":{"rank":[[2,null],[0,1]],"ttft_ms":[[120,null],[90,100.5]],"no_split_rank":[3,4],
   "no_split_ttft_ms":[300,400],"tpot_ms":[20,30],"prefill_extrapolated":[false,true],"decode_extrapolated":[false,true],"future":{"x":[null]}},
 "total_pairs":4,"unknown_transfer_pairs":1,"unknown_link_classes":["cross-zone"],"kv_transfer_model":true,"processing_time_ms":0.25}`
	var a pairsAnswer
	if err := decodeAnswer([]byte(body), 2, 2, &a); err != nil {
		t.Fatal(err)
	}
	var want pairsAnswer
	want.Split, want.KVTransferModel = true, true
	m := &want.Matrix
	m.Rank, m.TTFTMs = [][]int{{2, -1}, {0, 1}}, [][]float64{{120, 0}, {90, 100.5}}
	m.NoSplitRank, m.NoSplitTTFTMs, m.TPOTMs = []int{3, 4}, []float64{300, 400}, []float64{20, 30}
	m.PrefillExtrapolated, m.DecodeExtrapolated = []bool{false, true}, []bool{false, true}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("decoded %+v, want %+v", a, want)
	}
	// The expected sizes only presize: an answer of another shape decodes
	// as it is (and Ranking.read refuses it), its rows each their own.
	for _, size := range [][2]int{{0, 0}, {7, 3}, {1, 1}} {
		var b pairsAnswer
		if err := decodeAnswer([]byte(body), size[0], size[1], &b); err != nil || !reflect.DeepEqual(b, want) {
			t.Errorf("sized %v: decoded %+v (%v), want %+v", size, b, err, want)
		}
		b.Matrix.Rank[0] = append(b.Matrix.Rank[0], 9)
		if b.Matrix.Rank[1][0] != 0 {
			t.Errorf("sized %v: appending to row 0 wrote into row 1: %v", size, b.Matrix.Rank)
		}
	}
	for _, bad := range []string{``, `[]`, `{"split":tru}`, `{"matrix":{"rank":[[1,}}`, `{"matrix":{"rank":[["x"]]}}`, `{"split":true`} {
		var a pairsAnswer
		if err := decodeAnswer([]byte(bad), 2, 2, &a); err == nil {
			t.Errorf("%q decoded as %+v", bad, a)
		}
	}
	if err := decodeAnswer([]byte(strings.Repeat("[", 10)), 2, 2, &a); err == nil {
		t.Error("an array decoded as an answer")
	}
}
