package wire

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/headroomhq/headroom/features"
)

// The request encoders write what llm-d's router sends: its field order,
// every field of a text request, numbers as the shortest literal that reads
// back exactly. Tools that play the router (loadgen, the demo) and tests
// use them, so the bodies Headroom is measured on are the bodies it serves.

// rowOrder is the order in which the router's client writes a row's fields.
var rowOrder = [...]fieldID{
	fKVCache, fInputTokens, fWaiting, fRunning, fGenerated, fPrefixScore, fPodType,
	fEncoderInput, fEncoderMatched, fPrefillInFlight, fDecodeInFlight,
}

// AppendPredictRequest appends the body of POST /predict/bulk/strict,
// {"requests":[row, ...]}.
func AppendPredictRequest(dst []byte, rows []features.Row) []byte {
	dst = append(dst, `{"requests":[`...)
	for i := range rows {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendRow(dst, &rows[i])
	}
	return append(dst, "]}"...)
}

// AppendTrainingRequest appends the body of POST /add_training_data_bulk,
// {"entries":[entry, ...]}.
func AppendTrainingRequest(dst []byte, samples []features.Sample) []byte {
	dst = append(dst, `{"entries":[`...)
	for i := range samples {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendEntry(dst, &samples[i])
	}
	return append(dst, "]}"...)
}

// AppendRow appends one prediction row as a JSON object. pod_type is left
// out when empty, as the router leaves it out for a monolithic pod.
func AppendRow(dst []byte, r *features.Row) []byte {
	dst = appendRowFields(append(dst, '{'), r)
	return append(dst, '}')
}

// AppendEntry appends one training entry (one line of an llm-d trace): the
// row, both labels (0 meaning not measured), and the timestamp and served
// predictions when the sample has them.
func AppendEntry(dst []byte, s *features.Sample) []byte {
	dst = appendRowFields(append(dst, '{'), &s.Row)
	dst = appendFloatField(dst, fActualTTFT, s.ActualTTFTMs)
	dst = appendFloatField(dst, fActualTPOT, s.ActualTPOTMs)
	if s.PredictedTTFTMs > 0 {
		dst = appendFloatField(dst, fPredictedTTFT, s.PredictedTTFTMs)
	}
	if s.PredictedTPOTMs > 0 {
		dst = appendFloatField(dst, fPredictedTPOT, s.PredictedTPOTMs)
	}
	if !s.Timestamp.IsZero() {
		dst = appendKey(dst, fTimestamp)
		dst = append(dst, '"')
		dst = s.Timestamp.UTC().AppendFormat(dst, time.RFC3339Nano)
		dst = append(dst, '"')
	}
	if tr := s.Transfer; tr != nil {
		dst = appendTransfer(dst, tr)
	}
	return append(dst, '}')
}

// appendTransfer writes a sample's KV-transfer members: the token count
// always (it is what says the sample has a transfer), the others when set.
func appendTransfer(dst []byte, tr *features.Transfer) []byte {
	if tr.Ms > 0 {
		dst = appendFloatField(dst, fKVTransferMs, tr.Ms)
	}
	dst = appendKey(dst, fKVTransferTokens)
	dst = strconv.AppendInt(dst, tr.Tokens, 10)
	if tr.BytesPerToken > 0 {
		dst = appendFloatField(dst, fKVBytesPerToken, tr.BytesPerToken)
	}
	for _, pod := range [...]struct {
		f    fieldID
		name string
	}{{fPrefillPod, tr.PrefillPod}, {fDecodePod, tr.DecodePod}} {
		if pod.name != "" {
			dst = appendString(appendKey(dst, pod.f), pod.name)
		}
	}
	for _, topo := range [...]struct {
		f fieldID
		t *features.Topology
	}{{fPrefillTopology, &tr.Prefill}, {fDecodeTopology, &tr.Decode}} {
		if *topo.t != (features.Topology{}) {
			dst = appendTopology(appendKey(dst, topo.f), topo.t)
		}
	}
	if tr.Concurrent > 0 {
		dst = appendKey(dst, fConcurrentTransfers)
		dst = strconv.AppendInt(dst, tr.Concurrent, 10)
	}
	return dst
}

// appendTopology writes a placement object; empty labels are left out.
func appendTopology(dst []byte, t *features.Topology) []byte {
	dst = append(dst, '{')
	for i, name := range topologyLabels {
		v := *topologyLabel(t, i)
		if v == "" {
			continue
		}
		if dst[len(dst)-1] != '{' {
			dst = append(dst, ',')
		}
		dst = appendString(append(appendString(dst, name), ':'), v)
	}
	return append(dst, '}')
}

// appendRowFields writes the row's members, comma-separated, after an
// opening brace.
func appendRowFields(dst []byte, r *features.Row) []byte {
	for _, f := range rowOrder {
		dst = appendRowField(dst, f, r)
	}
	return dst
}

// appendRowField writes row field f (pod_type only when set).
func appendRowField(dst []byte, f fieldID, r *features.Row) []byte {
	switch f {
	case fPodType:
		if r.PodType != "" {
			dst = appendKey(dst, f)
			dst = appendString(dst, r.PodType)
		}
	case fKVCache:
		dst = appendFloatField(dst, f, r.KVCachePercentage)
	case fPrefixScore:
		dst = appendFloatField(dst, f, r.PrefixCacheScore)
	default:
		dst = appendKey(dst, f)
		dst = strconv.AppendInt(dst, *intField(f, r), 10)
	}
	return dst
}

// AppendPairsRequest appends the body of POST /predict/pairs (docs/PROTOCOL.md
// §4.7), what DecodePairsRequest reads: the request's own fields, its
// optional settings when set, then each candidate's pod, topology, KV
// transfers in flight (Concurrent − 1, when known) and pod fields.
func AppendPairsRequest(dst []byte, r *PairsRequest) []byte {
	dst = append(dst, '{')
	for _, f := range rowOrder {
		if pairRequestFields.has(f) {
			dst = appendRowField(dst, f, &features.Row{InputTokenLength: r.InputTokenLength,
				NumTokensGenerated: r.NumTokensGenerated, EncoderInputSize: r.EncoderInputSize})
		}
	}
	for _, opt := range [...]struct {
		key string
		v   float64
	}{{"kv_bytes_per_token", r.KVBytesPerToken}, {"ttft_slo_ms", r.TTFTSLOMs}, {"tpot_slo_ms", r.TPOTSLOMs}} {
		if opt.v > 0 {
			dst = append(dst, `,"`+opt.key+`":`...)
			dst = AppendFloat(dst, opt.v)
		}
	}
	if r.K > 0 {
		dst = append(dst, `,"k":`...)
		dst = strconv.AppendInt(dst, int64(r.K), 10)
	}
	for _, list := range [...]struct {
		key  string
		pods []PairCandidate
	}{{"prefill", r.Prefill}, {"decode", r.Decode}} {
		dst = append(dst, `,"`+list.key+`":[`...)
		for i := range list.pods {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendPairCandidate(dst, &list.pods[i])
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

func appendPairCandidate(dst []byte, c *PairCandidate) []byte {
	dst = append(dst, `{"pod":`...)
	dst = appendString(dst, c.Pod)
	dst = append(dst, `,"topology":`...)
	dst = appendTopology(dst, &c.Topology)
	if c.Concurrent > 0 {
		dst = append(dst, `,"kv_transfers_in_flight":`...)
		dst = strconv.AppendInt(dst, c.Concurrent-1, 10)
	}
	for _, f := range rowOrder {
		if candidateFields.has(f) {
			dst = appendRowField(dst, f, &c.Row)
		}
	}
	return append(dst, '}')
}

// appendKey writes `"name":`, after a comma unless the object has just
// opened.
func appendKey(dst []byte, f fieldID) []byte {
	if len(dst) > 0 && dst[len(dst)-1] != '{' {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, fieldNames[f]...)
	return append(dst, `":`...)
}

func appendFloatField(dst []byte, f fieldID, v float64) []byte {
	return AppendFloat(appendKey(dst, f), v)
}

// appendString writes s as a JSON string. Role labels are plain ASCII and
// are written as they are; anything else goes through encoding/json.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// RowObject returns r as a generic JSON object with every field of a row,
// defaults included: how the reference echoes a row in /predict/bulk
// errors.
func RowObject(r *features.Row) map[string]any {
	m := make(map[string]any, len(rowOrder))
	s := features.Sample{Row: *r}
	for _, f := range rowOrder {
		switch fieldKinds[f] {
		case kindCount:
			m[fieldNames[f]] = *intField(f, &s.Row)
		case kindPodType:
			m[fieldNames[f]] = r.PodType
		default:
			m[fieldNames[f]] = *floatField(f, &s)
		}
	}
	return m
}
