// Package wire is llm-d's latency-predictor wire format: the bodies its
// router sends (prediction rows, training entries, flush requests) and the
// prediction responses it reads. It decodes and validates request bodies
// into features.Row and features.Sample with the reference's per-field 422
// errors, encodes responses and requests, and holds the limits a value must
// meet. It has no HTTP in it: the servers (package api), the trace reader,
// the load generator and the demo's client all go through it, so there is
// one set of field names and one set of rules.
//
// Decoding is hand-written over internal/jsonscan: a 100-row prediction
// body decodes in about 30 µs with no allocations, several times faster than
// encoding/json or any library measured, and only a decoder that sees each
// field can say which field of which row is wrong.
package wire

import (
	"math"
	"strings"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/jsonscan"
)

// MaxBulkRows is the largest prediction batch the reference accepts
// (docs/PROTOCOL.md §4.1); callers pass it, or a larger configured limit, as maxRows.
const MaxBulkRows = 10_000

// Decoder turns request bodies into validated rows and samples, and says
// what is wrong with the ones that are not, in the 422 shape of the
// reference servers (docs/PROTOCOL.md §2). It works on body bytes: no HTTP in it.
// Nothing it returns aliases the body, which the caller may reuse at once.
//
// The zero Decoder applies DefaultDecodeLimits. It holds no state between
// calls and is safe for concurrent use.
//
// Decoding rules common to every body (each is tested):
//   - Not JSON (including trailing data, invalid UTF-8 in a string, nesting
//     deeper than DecodeLimits.MaxDepth) → one json_invalid error; no other error
//     is reported, and nothing is returned as valid.
//   - Unknown fields are ignored, whatever their value.
//   - A known field appearing twice in one object is an error for that
//     object (pydantic keeps the last; ambiguous input is refused here).
//     Repeated unknown fields are ignored like any unknown field.
//   - Integer fields take integers, integral floats (200.0, 2e2) and numeric
//     strings ("200"); float fields take integer literals and numeric
//     strings. NaN, infinities in any spelling (bare NaN / Infinity / -inf,
//     "NaN" strings) and literals that overflow float64 (1e400) fail with
//     finite_number; nothing non-finite is ever returned.
//   - null is accepted for pod_type (meaning "") and, in optional fields,
//     means absent (the default); in a required field it is a type error.
//   - Timestamp is left zero when absent: the caller stamps the receive time,
//     which keeps decoding deterministic.
type Decoder struct {
	Limits DecodeLimits
}

// DecodePredictRequest decodes POST /predict: one row as the top-level
// object. Negative token-in-flight values are errors here (docs/PROTOCOL.md §3).
func DecodePredictRequest(body []byte) (features.Row, []FieldError) {
	return Decoder{}.DecodePredictRequest(body)
}

// DecodeEntry decodes one training entry (a trace line) with the default
// limits; see Decoder.DecodeEntry.
func DecodeEntry(body []byte) (features.Sample, []FieldError) {
	return Decoder{}.DecodeEntry(body)
}

// DecodeBulkPredictRequest decodes {"requests": [row, ...]} with the default
// limits; see Decoder.DecodeBulkPredictRequest.
func DecodeBulkPredictRequest(body []byte, maxRows int, clampNegativeInFlight bool, dst []features.Row) ([]features.Row, int, []FieldError) {
	return Decoder{}.DecodeBulkPredictRequest(body, maxRows, clampNegativeInFlight, dst)
}

// DecodeSamples decodes POST /samples with the default limits; see
// Decoder.DecodeSamples.
func DecodeSamples(body []byte, maxEntries int) ([]features.Sample, []Rejection, []FieldError) {
	return Decoder{}.DecodeSamples(body, maxEntries)
}

// DecodeTrainingBulk decodes POST /add_training_data_bulk with the default
// limits; see Decoder.DecodeTrainingBulk.
func DecodeTrainingBulk(body []byte, maxEntries int) ([]features.Sample, []Rejection, []FieldError) {
	return Decoder{}.DecodeTrainingBulk(body, maxEntries)
}

// DecodePredictRequest decodes POST /predict: one row as the top-level
// object. Negative token-in-flight values are errors here (docs/PROTOCOL.md §3).
func (dec Decoder) DecodePredictRequest(body []byte) (features.Row, []FieldError) {
	sample, errs := dec.decodeOne(body, false)
	return sample.Row, errs
}

// DecodeEntry decodes one training entry given as the top-level object,
// by the rules of every training body: a line of an llm-d trace. A trace
// the service would refuse a line of is refused the same way, so what an
// offline replay learns from is what the service would have stored.
func (dec Decoder) DecodeEntry(body []byte) (features.Sample, []FieldError) {
	return dec.decodeOne(body, true)
}

// decodeOne decodes a body that is one row or one entry.
func (dec Decoder) decodeOne(body []byte, training bool) (features.Sample, []FieldError) {
	d := dec.newEntryDecoder(body, training)
	s := &d.s
	s.SkipSpace()
	if s.Peek() != '{' {
		return features.Sample{}, d.notAnObject(topLevel.loc(""))
	}
	var sample features.Sample
	if d.entry(1, topLevel, &sample) {
		s.Finish()
	}
	if s.Failed() {
		return features.Sample{}, []FieldError{jsonInvalid(s.Err())}
	}
	if d.errCount > 0 {
		return features.Sample{}, d.errs
	}
	return sample, nil
}

// DecodeBulkPredictRequest decodes POST /predict/bulk/strict and
// /predict/bulk: {"requests": [row, ...]} with 1 to maxRows rows (maxRows
// <= 0: no upper bound). It is the prediction hot path: a valid body
// allocates nothing when dst has room for its rows.
//
// Rows are appended to dst, which is returned. Any invalid row makes the
// whole request invalid (docs/PROTOCOL.md §4.1, §4.3): then dst comes back with its
// original length and errs lists at most Limits.MaxErrors errors.
//
// With clampNegativeInFlight (for /predict/bulk/strict, where one 422 fails
// every coalesced caller; docs/PROTOCOL.md §3) negative prefill_tokens_in_flight and
// decode_tokens_in_flight become 0 instead of errors, and clamped counts the
// values so changed. Fractional or non-finite values are errors either way.
func (dec Decoder) DecodeBulkPredictRequest(body []byte, maxRows int, clampNegativeInFlight bool, dst []features.Row) (rows []features.Row, clamped int, errs []FieldError) {
	n0 := len(dst)
	d := dec.newEntryDecoder(body, false)
	d.clamp = clampNegativeInFlight
	s := &d.s
	s.SkipSpace()
	if s.Peek() != '{' {
		return dst, 0, d.notAnObject(topLevel.loc(""))
	}
	start := s.Pos()
	seen := false
	count := 0
	var sample features.Sample
	for more := s.Open(1); more && !s.Failed(); more = s.Next('}') {
		key, ok := s.ReadKey()
		if !ok {
			break
		}
		if string(key) != "requests" {
			s.SkipValue(2)
			continue
		}
		if seen {
			d.reportToken(problem{code: probDuplicateKey, reason: "requests"}, []any{"body", "requests"}, 2)
			continue
		}
		seen = true
		s.SkipSpace()
		if s.Peek() != '[' {
			d.reportToken(problem{code: probListType}, []any{"body", "requests"}, 2)
			continue
		}
		for more := s.Open(2); more; more = s.Next(']') {
			if maxRows > 0 && count >= maxRows || d.errCount >= d.errLimit {
				// Past the cap the request is invalid anyway: only check
				// syntax and count.
				if !s.SkipValue(3) {
					break
				}
			} else {
				if !d.entry(3, locBase{list: "requests", index: count}, &sample) {
					break
				}
				if d.errCount == 0 {
					dst = append(dst, sample.Row)
				}
			}
			count++
		}
	}
	if !s.Failed() {
		s.Finish()
	}
	if s.Failed() {
		return dst[:n0], 0, []FieldError{jsonInvalid(s.Err())}
	}
	switch {
	case !seen:
		d.add(problem{code: probMissing}.fieldError([]any{"body", "requests"}, s.Echo(start, s.Pos())))
	case d.errCount == 0 && count == 0 || maxRows > 0 && count > maxRows:
		d.add(listLengthError([]any{"body", "requests"}, count, maxRows))
	}
	if d.errCount > 0 {
		return dst[:n0], 0, d.errs
	}
	return dst, d.clamped, nil
}

// DecodeSamples decodes POST /samples, which takes three forms: the bulk
// envelope {"entries": [entry, ...]}, a bare array [entry, ...], or one
// entry as the top-level object. An object is the envelope exactly when it
// has an "entries" key.
//
// Entries are validated one by one, unlike the reference's all-or-nothing
// batches (docs/PROTOCOL.md §5.1): valid ones are returned in order,
// invalid ones are reported in rejected and dropped. Entries whose labels
// are both 0 are valid and returned; they carry no label, and the store
// discards them.
//
// envelopeErrs is non-empty when the body as a whole is malformed: not
// JSON, not an object or array, an envelope whose entries is not a list, or
// more than maxEntries entries (maxEntries <= 0: no bound). The caller
// answers 422 with it, and then samples and rejected are nil. An empty list
// is valid and yields no samples.
func (dec Decoder) DecodeSamples(body []byte, maxEntries int) (samples []features.Sample, rejected []Rejection, envelopeErrs []FieldError) {
	return dec.decodeSamples(body, maxEntries, false)
}

// DecodeTrainingBulk decodes POST /add_training_data_bulk: like DecodeSamples,
// but only the envelope form is accepted, so a body without "entries" is an
// envelope error (missing), as in the reference.
func (dec Decoder) DecodeTrainingBulk(body []byte, maxEntries int) (samples []features.Sample, rejected []Rejection, envelopeErrs []FieldError) {
	return dec.decodeSamples(body, maxEntries, true)
}

func (dec Decoder) decodeSamples(body []byte, maxEntries int, envelopeOnly bool) ([]features.Sample, []Rejection, []FieldError) {
	d := dec.newEntryDecoder(body, true)
	s := &d.s
	s.SkipSpace()
	c := s.Peek()
	if c != '{' && (c != '[' || envelopeOnly) {
		return nil, nil, d.notAnObject(topLevel.loc(""))
	}
	start := s.Pos()
	b := sampleBatch{d: &d, maxErrors: d.lim.MaxErrors, maxEntries: maxEntries}
	// Size the result once: no valid entry is shorter than minEntryBytes.
	capacity := len(body)/minEntryBytes + 1
	if maxEntries > 0 && capacity > maxEntries {
		capacity = maxEntries
	}
	b.samples = make([]features.Sample, 0, capacity)
	var envErrs []FieldError
	listLoc := []any{"body"}
	switch {
	case c == '[':
		b.list(1, "")
	case envelopeOnly || hasKey(*s, "entries"):
		listLoc = []any{"body", "entries"}
		seen := false
		for more := s.Open(1); more && !s.Failed(); more = s.Next('}') {
			key, ok := s.ReadKey()
			if !ok {
				break
			}
			if string(key) != "entries" {
				s.SkipValue(2)
				continue
			}
			if seen {
				t, ok := s.ReadToken(2)
				if ok {
					p := problem{code: probDuplicateKey, reason: "entries"}
					envErrs = append(envErrs, p.fieldError(listLoc, s.Echo(t.Start, t.End)))
				}
				continue
			}
			seen = true
			s.SkipSpace()
			if s.Peek() != '[' {
				if t, ok := s.ReadToken(2); ok {
					envErrs = append(envErrs, problem{code: probListType}.fieldError(listLoc, s.Echo(t.Start, t.End)))
				}
				continue
			}
			b.list(2, "entries")
		}
		if !seen && !s.Failed() {
			s.Finish() // the body must be JSON before it can lack a field
			if !s.Failed() {
				envErrs = append(envErrs, problem{code: probMissing}.fieldError(listLoc, s.Echo(start, s.Pos())))
			}
		}
	default:
		b.one()
	}
	if !s.Failed() {
		s.Finish()
	}
	if s.Failed() {
		return nil, nil, []FieldError{jsonInvalid(s.Err())}
	}
	if maxEntries > 0 && b.count > maxEntries {
		envErrs = append(envErrs, listLengthError(listLoc, b.count, maxEntries))
	}
	if len(envErrs) > 0 {
		return nil, nil, envErrs
	}
	return b.samples, b.rejected, nil
}

// minEntryBytes is the length of the shortest valid training entry: its
// required members with one-digit values, no white space.
var minEntryBytes = func() int {
	n := len("{}") - 1 // n members need n-1 commas
	for f := range numFields {
		if requiredInEntry.has(f) {
			n += len(`"":0,`) + len(fieldNames[f])
		}
	}
	return n
}()

// sampleBatch collects the entries of one training body.
type sampleBatch struct {
	d          *entryDecoder
	maxErrors  int // rejections that carry their full error list
	maxEntries int // entries decoded; past it they are only counted
	count      int
	samples    []features.Sample
	rejected   []Rejection
}

// list decodes a JSON array of entries at s.pos.
func (b *sampleBatch) list(depth int, name string) {
	s := &b.d.s
	for more := s.Open(depth); more; more = s.Next(']') {
		if b.maxEntries > 0 && b.count >= b.maxEntries {
			// Too many: the envelope is invalid; only check syntax and count.
			if !s.SkipValue(depth + 1) {
				return
			}
			b.count++
			continue
		}
		if !b.add(depth+1, locBase{list: name, index: b.count}) {
			return
		}
	}
}

// one decodes a single top-level entry.
func (b *sampleBatch) one() {
	b.add(1, topLevel)
}

// add decodes one entry and files it as a sample or a rejection.
func (b *sampleBatch) add(depth int, base locBase) bool {
	d := b.d
	d.errs, d.errCount = nil, 0
	d.errLimit = b.d.lim.MaxErrors
	if len(b.rejected) >= b.maxErrors {
		d.errLimit = 1 // enough for the one-line detail
	}
	var sample features.Sample
	if !d.entry(depth, base, &sample) {
		return false
	}
	index := b.count
	if base.index < 0 {
		index = 0
	}
	b.count++
	if d.errCount == 0 {
		b.samples = append(b.samples, sample)
		return true
	}
	r := Rejection{Index: index, Detail: describe(d.errs, d.errCount)}
	if len(b.rejected) < b.maxErrors {
		r.Errors = d.errs
	}
	b.rejected = append(b.rejected, r)
	return true
}

// hasKey reports whether the object at s.pos has the top-level key. It works
// on a copy of the scanner and stops at the key, so the common envelope,
// which starts with its key, costs one key read. A syntax error before the
// key is left for the real pass to find.
func hasKey(s jsonscan.Scanner, key string) bool {
	for more := s.Open(1); more && !s.Failed(); more = s.Next('}') {
		k, ok := s.ReadKey()
		if !ok {
			return false
		}
		if string(k) == key {
			return true
		}
		s.SkipValue(2)
	}
	return false
}

// entryDecoder decodes the rows or training entries of one request body and
// collects their errors.
type entryDecoder struct {
	s        jsonscan.Scanner
	lim      DecodeLimits
	training bool  // training entries: sample fields are known, sample ceilings apply
	maxCount int64 // ceiling on integer fields
	clamp    bool  // clamp negative token-in-flight values to 0
	clamped  int
	errs     []FieldError // reported errors, at most errLimit
	errCount int          // errors found, reported or not
	errLimit int
	lastPod  string // the last pod_type label allocated; see podTypeValue

	// labels, when not nil, holds the text of every pod name and topology
	// label read, one after another, and each label is a slice of its
	// String: a request's labels then cost an allocation per growth, not
	// one each. A Builder only appends and never rewrites a byte, so a
	// label stays valid as more are written. Only decoders whose labels
	// live as long as their request have one: a label keeps the arena it
	// is in alive.
	labels *strings.Builder

	// next[f] is the field that followed field f last time (next[numFields]:
	// the first field), learnt as rows are read. Encoders write keys in a
	// fixed order, so after the first row most keys are confirmed by one
	// comparison instead of being scanned and looked up.
	next [numFields + 1]fieldID
}

func (dec Decoder) newEntryDecoder(body []byte, training bool) entryDecoder {
	lim := dec.Limits.withDefaults()
	d := entryDecoder{
		s:        jsonscan.New(body, lim.MaxDepth),
		lim:      lim,
		training: training,
		maxCount: lim.MaxPredictCount,
		errLimit: lim.MaxErrors,
	}
	if training {
		d.maxCount = lim.MaxSampleCount
	}
	return d
}

// notAnObject reports a top-level value that is not an object (the
// caller has checked the first byte): json_invalid if the body is not JSON,
// missing if it is empty or null, model_attributes_type otherwise.
func (d *entryDecoder) notAnObject(loc []any) []FieldError {
	s := &d.s
	s.SkipSpace()
	if s.AtEnd() {
		return []FieldError{missingBody()}
	}
	t, ok := s.ReadToken(1)
	if ok {
		s.Finish()
	}
	if s.Failed() {
		return []FieldError{jsonInvalid(s.Err())}
	}
	if t.Kind == jsonscan.Null {
		return []FieldError{missingBody()}
	}
	return []FieldError{problem{code: probModelType}.fieldError(loc, s.Echo(t.Start, t.End))}
}

func (d *entryDecoder) add(e FieldError) {
	d.errCount++
	if len(d.errs) < d.errLimit {
		d.errs = append(d.errs, e)
	}
}

// report records p for the value data[start:end]; the loc and the echoed
// input are built only if the error will be kept.
func (d *entryDecoder) report(p problem, base locBase, field string, start, end int) {
	d.errCount++
	if len(d.errs) < d.errLimit {
		d.errs = append(d.errs, p.fieldError(base.loc(field), d.s.Echo(start, end)))
	}
}

// reportToken reads the next value and records p for it.
func (d *entryDecoder) reportToken(p problem, loc []any, depth int) {
	s := &d.s
	t, ok := s.ReadToken(depth)
	if !ok {
		return
	}
	d.add(p.fieldError(loc, s.Echo(t.Start, t.End)))
}

// entry decodes the object at s.pos into out (which it resets), reporting
// validation errors; it returns false only on a syntax error.
func (d *entryDecoder) entry(depth int, base locBase, out *features.Sample) bool {
	s := &d.s
	s.SkipSpace()
	if s.Peek() != '{' {
		t, ok := s.ReadToken(depth)
		if ok {
			d.report(problem{code: probModelType}, base, "", t.Start, t.End)
		}
		return ok
	}
	start := s.Pos()
	*out = features.Sample{}
	var seen, nulls fieldSet // nulls: fields given as null, which count as absent
	prev := numFields        // the previous known field; numFields at the start
	for more := s.Open(depth); more; more = s.Next('}') {
		f, known := d.predictedKey(prev)
		if s.Failed() {
			return false
		}
		if !known {
			key, ok := s.ReadKey()
			if !ok {
				return false
			}
			f, known = lookupField(key)
		}
		if known {
			d.next[prev] = f
			prev = f
		}
		if !known || !d.training && f >= firstTrainingField {
			if !s.SkipValue(depth + 1) {
				return false
			}
			continue
		}
		if seen.has(f) {
			t, ok := s.ReadToken(depth + 1)
			if !ok {
				return false
			}
			d.report(problem{code: probDuplicateKey, reason: fieldNames[f]}, base, fieldNames[f], t.Start, t.End)
			continue
		}
		seen |= 1 << f
		s.SkipSpace()
		if fieldKinds[f] == kindTopology && s.Peek() == '{' {
			if !d.placement(depth+1, base, f, out) {
				return false
			}
			continue
		}
		if fieldKinds[f].isNumeric() {
			// Fast path: a plain number that is valid for the field. Anything
			// else takes the general path below, which also reports.
			rest := s.Rest()
			if n, end, ok, _, _ := jsonscan.LexNumber(rest, 0); ok && d.setNumber(f, n, rest[:end], out) {
				s.Advance(end)
				continue
			}
		}
		t, ok := s.ReadToken(depth + 1)
		if !ok {
			return false
		}
		if t.Kind == jsonscan.Null {
			nulls |= 1 << f
		}
		if code := d.set(f, &t, out); code != noProblem {
			d.report(d.problemFor(f, code, &t), base, fieldNames[f], t.Start, t.End)
		}
	}
	if s.Failed() {
		return false
	}
	required := requiredInRow
	if d.training {
		required = requiredInEntry
	}
	if missing := required &^ seen; missing != 0 {
		var whole any // the echo of the entry, built once for all its missing fields
		for f := range numFields {
			if !missing.has(f) {
				continue
			}
			if whole == nil && len(d.errs) < d.errLimit {
				whole = s.Echo(start, s.Pos())
			}
			d.add(problem{code: probMissing}.fieldError(base.loc(fieldNames[f]), whole))
		}
	}
	if out.Transfer != nil {
		d.checkTransfer(base, seen&^nulls, start, out)
	}
	return true
}

// checkTransfer applies the rules that tie a sample's transfer fields to
// each other and to its labels (docs/PROTOCOL.md §5.1):
//   - a measured transfer (actual_kv_transfer_ms > 0) must say how many
//     tokens moved and where both pods are, or it cannot be learned from;
//   - it is part of the TTFT, so it must be shorter than actual_ttft_ms
//     when that is measured (the trainer subtracts it);
//   - no more tokens can move than the prompt has.
func (d *entryDecoder) checkTransfer(base locBase, given fieldSet, start int, out *features.Sample) {
	tr := out.Transfer
	if tr.Ms > 0 {
		var whole any
		for _, f := range [...]fieldID{fKVTransferTokens, fPrefillTopology, fDecodeTopology} {
			if given.has(f) {
				continue
			}
			if whole == nil && len(d.errs) < d.errLimit {
				whole = d.s.Echo(start, d.s.Pos())
			}
			d.add(problem{code: probMissing}.fieldError(base.loc(fieldNames[f]), whole))
		}
		if ttft := out.ActualTTFTMs; ttft > 0 && tr.Ms >= ttft {
			p := problem{code: probLessThan, bound: ttft, reason: "actual_ttft_ms, which includes the transfer"}
			d.add(p.fieldError(base.loc(fieldNames[fKVTransferMs]), tr.Ms))
		}
	}
	if tr.Tokens > out.Row.InputTokenLength {
		p := le(float64(out.Row.InputTokenLength), true)
		d.add(p.fieldError(base.loc(fieldNames[fKVTransferTokens]), tr.Tokens))
	}
}

// topology decodes a pod's placement, the object at the read position,
// into dst, reporting each problem at loc(label). node is required; the
// other labels may be left out or null and then default to "", which
// equals "" (a cluster without zones has one unnamed zone); a label given
// is 1 to MaxTopologyLabelLen characters, and a label given twice is a
// duplicate_key (and, for node, not also missing). Every body that carries
// a topology reads it here, a training entry's prefill_topology and
// decode_topology as a /predict/pairs candidate's topology, so that the
// same labels give the same link class, and the same errors, wherever
// they come: a cluster without rack labels leaves them out on both sides.
// It returns false only on a syntax error.
func (d *entryDecoder) topology(depth int, loc func(label string) []any, dst *features.Topology) bool {
	s := &d.s
	start := s.Pos()
	var seen, reported [len(topologyLabels)]bool
	for more := s.Open(depth); more; more = s.Next('}') {
		key, ok := s.ReadKey()
		if !ok {
			return false
		}
		label := -1
		for i, name := range topologyLabels {
			if string(key) == name {
				label = i
			}
		}
		if label < 0 {
			if !s.SkipValue(depth + 1) {
				return false
			}
			continue
		}
		t, ok := s.ReadToken(depth + 1)
		if !ok {
			return false
		}
		name := topologyLabels[label]
		if seen[label] {
			reported[label] = true
			d.add(problem{code: probDuplicateKey, reason: name}.fieldError(loc(name), s.Echo(t.Start, t.End)))
			continue
		}
		seen[label] = true
		if t.Kind == jsonscan.Null {
			continue // as absent; a null node is then missing
		}
		v, code := d.labelValue(&t, MaxTopologyLabelLen)
		if code != noProblem {
			reported[label] = true
			d.add(problem{code: code, bound: MaxTopologyLabelLen}.fieldError(loc(name), s.Echo(t.Start, t.End)))
			continue
		}
		*topologyLabel(dst, label) = v
	}
	if s.Failed() {
		return false
	}
	if dst.Node == "" && !reported[0] {
		d.add(problem{code: probMissing}.fieldError(loc(topologyLabels[0]), s.Echo(start, s.Pos())))
	}
	return true
}

// placement decodes topology field f of a training entry (prefill_topology
// or decode_topology), the object at the read position, into out's
// transfer. It returns false only on a syntax error.
func (d *entryDecoder) placement(depth int, base locBase, f fieldID, out *features.Sample) bool {
	dst := &transferOf(out).Prefill
	if f == fDecodeTopology {
		dst = &out.Transfer.Decode
	}
	return d.topology(depth, func(label string) []any { return append(base.loc(fieldNames[f]), label) }, dst)
}

// topologyLabels are the keys of a topology object; node comes first
// because it is the one required.
var topologyLabels = [...]string{"node", "rack", "zone", "region"}

func topologyLabel(t *features.Topology, i int) *string {
	switch i {
	case 0:
		return &t.Node
	case 1:
		return &t.Rack
	case 2:
		return &t.Zone
	}
	return &t.Region
}

// transferOf returns the sample's transfer, creating it on its first field.
func transferOf(out *features.Sample) *features.Transfer {
	if out.Transfer == nil {
		out.Transfer = new(features.Transfer)
	}
	return out.Transfer
}

// predictedKey consumes the key at the read position and its colon if the
// key is the field that followed prev last time.
func (d *entryDecoder) predictedKey(prev fieldID) (fieldID, bool) {
	f := d.next[prev]
	if !d.s.MatchKey(fieldNames[f]) {
		return 0, false
	}
	return f, true
}

// setNumber stores the number literal lit into numeric field f if it is
// valid there as it stands, and reports whether it did. It is the hot path
// and says nothing about invalid values: set does.
func (d *entryDecoder) setNumber(f fieldID, n jsonscan.Number, lit []byte, out *features.Sample) bool {
	switch fieldKinds[f] {
	case kindCount:
		v, st := n.Int()
		if st != jsonscan.IntOK || v < 0 || v > d.maxCount {
			return false
		}
		*countField(f, out) = v
	case kindFraction, kindLatency, kindPredicted, kindBytes:
		v, ok := n.Float(lit)
		if !ok || v < 0 || v > d.floatMax(f) {
			return false
		}
		*floatField(f, out) = v
	default:
		return false
	}
	return true
}

// set stores the value of field f from t into out, or returns what is
// wrong with it. null in an optional field leaves the default.
func (d *entryDecoder) set(f fieldID, t *jsonscan.Token, out *features.Sample) problemCode {
	if t.Kind == jsonscan.Null && !requiredInEntry.has(f) {
		return noProblem
	}
	var code problemCode
	switch fieldKinds[f] {
	case kindCount:
		var v int64
		v, code = countValue(t, d.maxCount)
		if code == probGreaterEqual && d.clamp && (f == fPrefillInFlight || f == fDecodeInFlight) {
			d.clamped++
			v, code = 0, noProblem
		}
		if code == noProblem {
			*countField(f, out) = v
		}
	case kindFraction, kindLatency, kindPredicted, kindBytes:
		var v float64
		if v, code = boundedFloat(t, d.floatMax(f)); code == noProblem {
			*floatField(f, out) = v
		}
	case kindPodType:
		out.Row.PodType, code = podTypeValue(t, d.lastPod)
		if code == noProblem && len(t.Text) > 0 {
			d.lastPod = out.Row.PodType
		}
	case kindTimestamp:
		out.Timestamp, code = timestampValue(t)
	case kindPodName:
		var v string
		if v, code = d.labelValue(t, MaxPodNameLen); code == noProblem {
			if f == fPrefillPod {
				transferOf(out).PrefillPod = v
			} else {
				transferOf(out).DecodePod = v
			}
		}
	case kindTopology:
		code = probModelType // an object goes to entryDecoder.topology
	}
	return code
}

// floatMax is the upper bound of a numeric field that is not a count.
func (d *entryDecoder) floatMax(f fieldID) float64 {
	switch fieldKinds[f] {
	case kindFraction:
		return 1
	case kindLatency:
		return d.lim.MaxLatencyMs
	case kindBytes:
		return MaxKVBytesPerToken
	}
	// predicted_*_ms: no ceiling; a wild prediction is what accuracy
	// tracking is for.
	return math.MaxFloat64
}

// problemFor completes a problem code found in field f with the bound or
// reason its message shows.
func (d *entryDecoder) problemFor(f fieldID, code problemCode, t *jsonscan.Token) problem {
	integer := fieldKinds[f] == kindCount
	switch code {
	case probGreaterEqual:
		return ge(0, integer)
	case probLessEqual:
		if integer {
			return le(float64(d.maxCount), true)
		}
		return le(d.floatMax(f), false)
	case probDatetimeParsing:
		_, reason := parseTimestamp(t.Text)
		return problem{code: code, reason: reason}
	case probStringTooLong:
		if fieldKinds[f] == kindPodName {
			return problem{code: code, bound: MaxPodNameLen}
		}
	}
	return problem{code: code}
}

// intField is the destination of integer field f. encoder_matched_size is
// not checked against encoder_input_size: the client does that before
// sending, and the reference does not.
func intField(f fieldID, row *features.Row) *int64 {
	switch f {
	case fInputTokens:
		return &row.InputTokenLength
	case fWaiting:
		return &row.NumRequestWaiting
	case fRunning:
		return &row.NumRequestRunning
	case fGenerated:
		return &row.NumTokensGenerated
	case fPrefillInFlight:
		return &row.PrefillTokensInFlight
	case fDecodeInFlight:
		return &row.DecodeTokensInFlight
	case fEncoderInput:
		return &row.EncoderInputSize
	case fEncoderMatched:
		return &row.EncoderMatchedSize
	}
	panic("wire: not an integer field: " + fieldNames[f])
}

// countField is the destination of integer field f of a sample.
func countField(f fieldID, out *features.Sample) *int64 {
	switch f {
	case fKVTransferTokens:
		return &transferOf(out).Tokens
	case fConcurrentTransfers:
		return &transferOf(out).Concurrent
	}
	return intField(f, &out.Row)
}

// floatField is the destination of float field f.
func floatField(f fieldID, out *features.Sample) *float64 {
	switch f {
	case fKVTransferMs:
		return &transferOf(out).Ms
	case fKVBytesPerToken:
		return &transferOf(out).BytesPerToken
	case fKVCache:
		return &out.Row.KVCachePercentage
	case fPrefixScore:
		return &out.Row.PrefixCacheScore
	case fActualTTFT:
		return &out.ActualTTFTMs
	case fActualTPOT:
		return &out.ActualTPOTMs
	case fPredictedTTFT:
		return &out.PredictedTTFTMs
	case fPredictedTPOT:
		return &out.PredictedTPOTMs
	}
	panic("wire: not a float field: " + fieldNames[f])
}
