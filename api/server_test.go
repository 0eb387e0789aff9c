package api

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/gin-gonic/gin"

	"github.com/headroomhq/headroom/predictor"
)

func TestReadBodyBuffer(t *testing.T) {
	const limit = 100
	errRead := errors.New("connection reset")
	for _, tc := range []struct {
		name          string
		body          io.Reader
		contentLength int64 // -1: unknown, as for a chunked upload
		want          string
		wantErr       error
	}{
		{"empty", strings.NewReader(""), 0, "", nil},
		{"small, length known", strings.NewReader("hello"), 5, "hello", nil},
		{"small, length unknown", strings.NewReader("hello"), -1, "hello", nil},
		{"exactly the limit", strings.NewReader(strings.Repeat("x", limit)), limit, strings.Repeat("x", limit), nil},
		{"one past the limit, length unknown", strings.NewReader(strings.Repeat("x", limit+1)), -1, "", errBodyTooLarge},
		{"declared past the limit", strings.NewReader("x"), limit + 1, "", errBodyTooLarge},
		{"longer than declared", strings.NewReader(strings.Repeat("x", 2*limit)), 10, "", errBodyTooLarge},
		{"one byte at a time", iotest.OneByteReader(strings.NewReader("{\"a\":1}")), -1, "{\"a\":1}", nil},
		{"read error", iotest.ErrReader(errRead), -1, "", errRead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Twice: the second read reuses the pooled buffer the first
			// returned, which must not leak into it.
			for range 2 {
				c, _ := gin.CreateTestContext(httptest.NewRecorder())
				c.Request = httptest.NewRequest(http.MethodPost, "/", io.NopCloser(tc.body))
				c.Request.ContentLength = tc.contentLength
				buf, err := readBodyBuffer(c, Limits{MaxBodyBytes: limit})
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				if err == nil && string(*buf) != tc.want {
					t.Fatalf("body %q, want %q", *buf, tc.want)
				}
				putBody(buf)
				tc.body = strings.NewReader(tc.want)
				if tc.wantErr != nil {
					return
				}
			}
		})
	}
}

// Prediction responses carry Content-Length, so a ten-row answer is not
// sent chunked, and the length is the body's.
func TestPredictionResponsesHaveContentLength(t *testing.T) {
	s := newService(t, Tokens{})
	s.ingestAndTrain(t, 60)
	srv := httptest.NewServer(s.predictH)
	defer srv.Close()
	rows := strings.Repeat(`{"kv_cache_percentage":0.1,"input_token_length":100,"num_request_waiting":0,"num_request_running":1,"num_tokens_generated":1,"prefix_cache_score":0},`, 10)
	for _, tc := range []struct{ path, body string }{
		{"/predict/bulk/strict", `{"requests":[` + strings.TrimSuffix(rows, ",") + `]}`},
		{"/predict/bulk", `{"requests":[` + strings.TrimSuffix(rows, ",") + `]}`},
		{"/predict", strings.SplitN(rows, "},", 2)[0] + "}"},
	} {
		resp, err := http.Post(srv.URL+tc.path, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %v %s", tc.path, resp.StatusCode, err, body)
		}
		if len(resp.TransferEncoding) != 0 || resp.ContentLength != int64(len(body)) {
			t.Errorf("%s: transfer encoding %v, content length %d for %d bytes", tc.path, resp.TransferEncoding, resp.ContentLength, len(body))
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", tc.path, ct)
		}
		if !bytes.HasPrefix(body, []byte(`{"`)) {
			t.Errorf("%s: body %s", tc.path, body)
		}
	}
}

// Building the servers writes nothing: gin's debug mode, where a process
// starts unless GIN_MODE says otherwise, would print every route (the
// test suite printed ~300 such lines).
func TestHandlersBuildQuietly(t *testing.T) {
	mode, out, errOut := gin.Mode(), gin.DefaultWriter, gin.DefaultErrorWriter
	t.Cleanup(func() { gin.SetMode(mode); gin.DefaultWriter, gin.DefaultErrorWriter = out, errOut })
	gin.SetMode(gin.DebugMode)
	var printed bytes.Buffer
	gin.DefaultWriter, gin.DefaultErrorWriter = &printed, &printed
	p, err := predictor.New(predictor.Mean, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	NewPredictorHandler(p, PredictorOptions{})
	if printed.Len() != 0 || gin.Mode() != gin.ReleaseMode {
		t.Fatalf("building a handler printed %d bytes, gin mode %q after; want nothing, release:\n%s",
			printed.Len(), gin.Mode(), printed.String())
	}
}
