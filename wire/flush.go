package wire

import (
	"fmt"
	"strings"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/jsonscan"
	"github.com/headroomhq/headroom/internal/orderedjson"
)

// FlushRequest is the body of POST /flush (docs/PROTOCOL.md §5.4). Every flag defaults
// to true: an empty body flushes everything, as in the reference.
type FlushRequest struct {
	FlushTrainingData bool
	FlushTestData     bool
	FlushMetrics      bool
	Reason            *string // nil when absent or null; echoed in the response
	// Confirm is Headroom's own field, false by default: a trainer without
	// a write token flushes only when it is true (api), so that nothing a
	// stray request can send deletes every sample.
	Confirm bool
}

// FlushResponse is the answer of POST /flush, in the reference's words,
// for every target: "<target>_training_samples_flushed" and
// "<target>_test_samples_flushed" of each, in the order of Flushed (the
// reference's TTFT and TPOT first). Set the counts of what was deleted,
// then Complete it.
type FlushResponse struct {
	Success   bool
	FlushedAt string
	Reason    *string
	// Flushed is what was deleted of each target, in the order of
	// features.Targets.
	Flushed        []FlushedTarget
	MetricsCleared bool
	Message        string
	// ModelsReset is always false: models stay in service after a flush,
	// trained on data that was valid when it arrived; the next model is
	// trained only on what arrives next.
	ModelsReset bool
}

// FlushedTarget is one target's part of a flush: the training and
// held-out (test) samples it deleted.
type FlushedTarget struct {
	Target      features.Target
	Train, Test int
}

// MarshalJSON writes the reference's fields in its order, the counts of
// every target in the order of Flushed.
func (r FlushResponse) MarshalJSON() ([]byte, error) {
	o := orderedjson.Object{{Key: "success", Value: r.Success}, {Key: "flushed_at", Value: r.FlushedAt}, {Key: "reason", Value: r.Reason}}
	for _, f := range r.Flushed {
		o = append(o, orderedjson.Field{Key: f.Target.String() + "_training_samples_flushed", Value: f.Train})
	}
	for _, f := range r.Flushed {
		o = append(o, orderedjson.Field{Key: f.Target.String() + "_test_samples_flushed", Value: f.Test})
	}
	o = append(o, orderedjson.Field{Key: "metrics_cleared", Value: r.MetricsCleared},
		orderedjson.Field{Key: "message", Value: r.Message}, orderedjson.Field{Key: "models_reset", Value: r.ModelsReset})
	return o.MarshalJSON()
}

// Complete fills in the rest of r, the answer to req carried out at at:
// the flags echoed and the message naming what was flushed.
func (r FlushResponse) Complete(req FlushRequest, at time.Time) FlushResponse {
	var parts []string
	if req.FlushTrainingData {
		parts = append(parts, r.counted("training", func(f FlushedTarget) int { return f.Train }))
	}
	if req.FlushTestData {
		parts = append(parts, r.counted("test", func(f FlushedTarget) int { return f.Test }))
	}
	if req.FlushMetrics {
		parts = append(parts, "all metric scores")
	}
	r.Message = "No data flushed"
	if len(parts) > 0 {
		r.Message = "Successfully flushed: " + strings.Join(parts, ", ")
	}
	r.Success, r.FlushedAt, r.Reason, r.MetricsCleared = true, Timestamp(at), req.Reason, req.FlushMetrics
	return r
}

// counted is one side's part of the message: "10 TTFT, 9 TPOT and 0
// KV-transfer training samples".
func (r FlushResponse) counted(side string, n func(FlushedTarget) int) string {
	each := make([]string, len(r.Flushed))
	for i, f := range r.Flushed {
		each[i] = fmt.Sprintf("%d %s", n(f), f.Target.Title())
	}
	list := strings.Join(each, ", ")
	if k := len(each); k > 1 {
		list = strings.Join(each[:k-1], ", ") + " and " + each[k-1]
	}
	return list + " " + side + " samples"
}

// DecodeFlushRequest decodes the optional body of POST /flush with the
// default limits; see Decoder.DecodeFlushRequest.
func DecodeFlushRequest(body []byte) (FlushRequest, []FieldError) {
	return Decoder{}.DecodeFlushRequest(body)
}

// DecodeFlushRequest decodes the optional body of POST /flush. An empty
// body, or null, means every default. The flags take what pydantic's lax
// bool takes: true/false, 0/1, and the strings true, false, yes, no, on,
// off, 1, 0 in any case. null is refused for a flag (bool_type) rather than
// read as the default, because the default is the destructive choice.
func (dec Decoder) DecodeFlushRequest(body []byte) (FlushRequest, []FieldError) {
	req := FlushRequest{FlushTrainingData: true, FlushTestData: true, FlushMetrics: true}
	d := dec.newEntryDecoder(body, false)
	s := &d.s
	s.SkipSpace()
	if s.AtEnd() {
		return req, nil
	}
	if s.Peek() != '{' {
		errs := d.notAnObject(topLevel.loc(""))
		if errs[0].Type == "missing" { // null: no body
			return req, nil
		}
		return FlushRequest{}, errs
	}
	var seen [5]bool
	for more := s.Open(1); more && !s.Failed(); more = s.Next('}') {
		key, ok := s.ReadKey()
		if !ok {
			break
		}
		field := -1
		switch string(key) {
		case "flush_training_data":
			field = 0
		case "flush_test_data":
			field = 1
		case "flush_metrics":
			field = 2
		case "reason":
			field = 3
		case "confirm":
			field = 4
		}
		if field < 0 {
			s.SkipValue(2)
			continue
		}
		name := [...]string{"flush_training_data", "flush_test_data", "flush_metrics", "reason", "confirm"}[field]
		t, ok := s.ReadToken(2)
		if !ok {
			break
		}
		if seen[field] {
			d.report(problem{code: probDuplicateKey, reason: name}, topLevel, name, t.Start, t.End)
			continue
		}
		seen[field] = true
		var code problemCode
		switch field {
		case 0:
			req.FlushTrainingData, code = boolValue(&t)
		case 1:
			req.FlushTestData, code = boolValue(&t)
		case 2:
			req.FlushMetrics, code = boolValue(&t)
		case 3:
			req.Reason, code = optionalString(&t)
		case 4:
			req.Confirm, code = boolValue(&t)
		}
		if code != noProblem {
			d.report(problem{code: code}, topLevel, name, t.Start, t.End)
		}
	}
	if !s.Failed() {
		s.Finish()
	}
	if s.Failed() {
		return FlushRequest{}, []FieldError{jsonInvalid(s.Err())}
	}
	if d.errCount > 0 {
		return FlushRequest{}, d.errs
	}
	return req, nil
}

// boolValue converts a flag the way pydantic's lax mode does.
func boolValue(t *jsonscan.Token) (bool, problemCode) {
	switch t.Kind {
	case jsonscan.Bool:
		return t.Truth, noProblem
	case jsonscan.Num:
		if v, st := t.Num.Int(); st == jsonscan.IntOK && (v == 0 || v == 1) {
			return v == 1, noProblem
		}
		return false, probBoolParsing
	case jsonscan.NonFinite:
		return false, probBoolParsing
	case jsonscan.String:
		for _, w := range [...]string{"true", "yes", "on", "1"} {
			if len(t.Text) == len(w) && jsonscan.HasPrefixFold(t.Text, w) {
				return true, noProblem
			}
		}
		for _, w := range [...]string{"false", "no", "off", "0"} {
			if len(t.Text) == len(w) && jsonscan.HasPrefixFold(t.Text, w) {
				return false, noProblem
			}
		}
		return false, probBoolParsing
	}
	return false, probBoolType
}

// optionalString converts a string-or-null field.
func optionalString(t *jsonscan.Token) (*string, problemCode) {
	switch t.Kind {
	case jsonscan.Null:
		return nil, noProblem
	case jsonscan.String:
		v := string(t.Text)
		return &v, noProblem
	}
	return nil, probStringType
}
