package wire

import (
	"math"
	"strconv"
)

// BytesPerPairOption bounds the size of one encoded option (a split pair
// with pod names of ordinary length is ~650 bytes), for sizing output
// buffers so that they do not grow by doubling.
const BytesPerPairOption = 1024

// BytesPerMatrixCell bounds the size of one pair in a matrix answer (its
// rank and its TTFT), for sizing output buffers.
const BytesPerMatrixCell = 32

// AppendPairsResponse writes the answer of POST /predict/pairs for req:
// the best option and whether it splits, then the ranked pairs and the
// ranked no-split options, each naming its pods, or with req.Matrix every
// option's rank and TTFT by candidate (docs/PROTOCOL.md, "Pair
// prediction"). Written by hand like the other prediction responses: a
// 16 × 16 answer is 256 objects of a dozen numbers each.
func AppendPairsResponse(dst []byte, req *PairsRequest, r *PairsRanking, meta *PredictionMeta, processingMs float64) []byte {
	slo := req.TTFTSLOMs > 0 || req.TPOTSLOMs > 0
	dst = append(dst, `{"split":`...)
	dst = strconv.AppendBool(dst, r.Best.Split())
	dst = append(dst, `,"best":`...)
	dst = appendPairOption(dst, req, &r.Best, slo)
	dst = append(dst, `,"ranked_by":"`...)
	dst = append(dst, r.RankedBy...)
	dst = append(dst, '"')
	if req.Matrix {
		dst = appendPairMatrix(dst, req, r)
	} else {
		dst = append(dst, `,"pairs":[`...)
		for i := range r.Pairs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendPairOption(dst, req, &r.Pairs[i], slo)
		}
		dst = append(dst, `],"no_split":[`...)
		for i := range r.NoSplit {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendPairOption(dst, req, &r.NoSplit[i], slo)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"total_pairs":`...)
	dst = strconv.AppendInt(dst, int64(r.TotalPairs), 10)
	dst = append(dst, `,"unknown_transfer_pairs":`...)
	dst = strconv.AppendInt(dst, int64(r.UnknownPairs), 10)
	dst = append(dst, `,"unknown_link_classes":[`...)
	for i, c := range r.UnknownLinks {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, c.String()...)
		dst = append(dst, '"')
	}
	dst = append(dst, `],"kv_transfer_model":`...)
	dst = strconv.AppendBool(dst, r.TransferModel)
	dst = append(dst, `,"split_ttft_model":`...)
	dst = strconv.AppendBool(dst, r.SplitTTFTModel)
	dst = append(dst, `,"predicted_at":"`...)
	dst = append(dst, meta.PredictedAt...)
	dst = append(dst, `","model_type":"`+ModelType+`","objective_type":"`...)
	dst = append(dst, meta.Objective...)
	dst = append(dst, `","quantile":`...)
	dst = append(dst, meta.Quantile...)
	dst = append(dst, `,"last_model_load":"`...)
	dst = append(dst, meta.LastLoad...)
	dst = append(dst, `","processing_time_ms":`...)
	dst = AppendFloat(dst, processingMs)
	return append(dst, '}')
}

// appendPairMatrix writes every option by candidate: rows are decode
// candidates, columns prefill candidates, null where a pair has no
// estimate.
func appendPairMatrix(dst []byte, req *PairsRequest, r *PairsRanking) []byte {
	nP := len(req.Prefill)
	cells := func(dst []byte, name string, cell func(dst []byte, o *PairOption) []byte) []byte {
		dst = append(dst, name...)
		for j := range r.EveryNoSplit {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, '[')
			for i := range nP {
				if i > 0 {
					dst = append(dst, ',')
				}
				if at := r.PairAt[j*nP+i]; at >= 0 {
					dst = cell(dst, &r.EveryPair[at])
				} else {
					dst = append(dst, "null"...)
				}
			}
			dst = append(dst, ']')
		}
		return append(dst, ']')
	}
	column := func(dst []byte, name string, n int, cell func(dst []byte, i int) []byte) []byte {
		dst = append(dst, name...)
		for i := range n {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = cell(dst, i)
		}
		return append(dst, ']')
	}
	rank := func(dst []byte, o *PairOption) []byte { return strconv.AppendInt(dst, int64(o.Rank), 10) }
	ttft := func(dst []byte, o *PairOption) []byte { return appendMs(dst, o.TTFT.Ms) }
	alone := func(cell func(dst []byte, o *PairOption) []byte) func(dst []byte, j int) []byte {
		return func(dst []byte, j int) []byte { return cell(dst, &r.EveryNoSplit[j]) }
	}
	nD := len(r.EveryNoSplit)
	dst = cells(dst, `,"matrix":{"rank":[`, rank)
	dst = cells(dst, `,"ttft_ms":[`, ttft)
	dst = column(dst, `,"no_split_rank":[`, nD, alone(rank))
	dst = column(dst, `,"no_split_ttft_ms":[`, nD, alone(ttft))
	dst = column(dst, `,"tpot_ms":[`, nD, alone(func(dst []byte, o *PairOption) []byte { return appendMs(dst, o.TPOT.Ms) }))
	dst = column(dst, `,"prefill_extrapolated":[`, nP, func(dst []byte, i int) []byte { return strconv.AppendBool(dst, r.PrefillExtrapolated[i]) })
	dst = column(dst, `,"decode_extrapolated":[`, nD, alone(func(dst []byte, o *PairOption) []byte { return strconv.AppendBool(dst, o.Extrapolated) }))
	return append(dst, '}')
}

// appendPairOption writes one option; a no-split option has a null
// prefill pod and no transfer parts, and headroom is written only when the
// request gave an SLO.
func appendPairOption(dst []byte, req *PairsRequest, o *PairOption, slo bool) []byte {
	dst = append(dst, `{"prefill_pod":`...)
	if o.Split() {
		dst = appendString(dst, req.Prefill[o.Prefill].Pod)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"decode_pod":`...)
	dst = appendString(dst, req.Decode[o.Decode].Pod)
	dst = append(dst, `,"prefill_index":`...)
	dst = strconv.AppendInt(dst, int64(o.Prefill), 10)
	dst = append(dst, `,"decode_index":`...)
	dst = strconv.AppendInt(dst, int64(o.Decode), 10)
	dst = append(dst, `,"split":`...)
	dst = strconv.AppendBool(dst, o.Split())
	dst = append(dst, `,"rank":`...)
	dst = strconv.AppendInt(dst, int64(o.Rank), 10)
	dst = appendEstimate(dst, `,"ttft_ms":`, `,"ttft_prediction_bounds":[`, &o.TTFT)
	dst = appendEstimate(dst, `,"tpot_ms":`, `,"tpot_prediction_bounds":[`, &o.TPOT)
	dst = append(dst, `,"extrapolated":`...)
	dst = strconv.AppendBool(dst, o.Extrapolated)
	if o.Split() {
		dst = append(dst, `,"link_class":"`...)
		dst = append(dst, o.Link.String()...)
		dst = append(dst, `","kv_transfer_tokens":`...)
		dst = strconv.AppendInt(dst, o.TransferTokens, 10)
		if o.SplitPart.Ms > 0 {
			dst = appendEstimate(dst, `,"split_ttft_ms":`, `,"split_ttft_prediction_bounds":[`, &o.SplitPart)
			dst = append(dst, `,"prefill_load_ms":`...)
			dst = appendMs(dst, o.PrefillLoadMs)
		} else {
			dst = appendEstimate(dst, `,"prefill_ms":`, `,"prefill_prediction_bounds":[`, &o.PrefillPart)
			dst = appendEstimate(dst, `,"kv_transfer_ms":`, `,"kv_transfer_prediction_bounds":[`, &o.Transfer)
		}
		dst = append(dst, `,"decode_load_ms":`...)
		dst = appendMs(dst, o.DecodeLoadMs)
	}
	if slo {
		meets := true
		if req.TTFTSLOMs > 0 {
			dst = append(dst, `,"ttft_headroom_ms":`...)
			dst = appendMs(dst, o.TTFTHeadroomMs)
			meets = meets && o.TTFTHeadroomMs >= 0
		}
		if req.TPOTSLOMs > 0 {
			dst = append(dst, `,"tpot_headroom_ms":`...)
			dst = appendMs(dst, o.TPOTHeadroomMs)
			meets = meets && o.TPOTHeadroomMs >= 0
		}
		dst = append(dst, `,"meets_slo":`...)
		dst = strconv.AppendBool(dst, meets)
	}
	return append(dst, '}')
}

// appendEstimate writes an estimate as a value member and a bounds member.
func appendEstimate(dst []byte, value, bounds string, e *Estimate) []byte {
	dst = append(dst, value...)
	dst = appendMs(dst, e.Ms)
	dst = append(dst, bounds...)
	dst = appendMs(dst, e.Bounds[0])
	dst = append(dst, ',')
	dst = appendMs(dst, e.Bounds[1])
	return append(dst, ']')
}

// appendMs writes milliseconds rounded to the microsecond, which is finer
// than any latency model can mean. A 16 × 16 answer has over 4,000
// numbers, and the shortest exact form of each (AppendFloat) was 40% of the
// route's CPU time; an integer and three decimals cost a fraction of it.
func appendMs(dst []byte, v float64) []byte {
	if !(math.Abs(v) < 1e12) { // NaN, infinities, and what would overflow
		return AppendFloat(dst, v)
	}
	us := int64(math.Round(v * 1000))
	if us < 0 {
		dst = append(dst, '-')
		us = -us
	}
	dst = strconv.AppendInt(dst, us/1000, 10)
	frac := us % 1000
	if frac == 0 {
		return dst
	}
	digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
	n := 3
	for digits[n-1] == '0' {
		n--
	}
	dst = append(dst, '.')
	return append(dst, digits[:n]...)
}
