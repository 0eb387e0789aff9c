package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestLeanConnAgainstNetHTTP(t *testing.T) {
	var seen atomic.Value // the last request's method, headers and body
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen.Store(r.Method + " " + r.Header.Get("Content-Type") + " " + r.Header.Get("Authorization") + " " + string(body))
		w.Write(body)
	})
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) {
		for i := range 3 {
			w.Write([]byte(strings.Repeat(string(rune('a'+i)), 3000)))
			w.(http.Flusher).Flush() // forces chunked encoding
		}
	})
	mux.HandleFunc("/close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusTeapot)
		w.Write([]byte("bye"))
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(time.Second):
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, tc := range []struct {
		path, body, token string
		status            int
		want              string
		wantSeen          string
	}{
		{"/echo", `{"requests":[]}`, "", 200, `{"requests":[]}`, `POST application/json  {"requests":[]}`},
		{"/echo", `{}`, "s3cret", 200, `{}`, `POST application/json Bearer s3cret {}`},
		{"/chunked", `{}`, "", 200, strings.Repeat("a", 3000) + strings.Repeat("b", 3000) + strings.Repeat("c", 3000), ""},
		{"/close", `{}`, "", 418, "bye", ""},
	} {
		t.Run(tc.path, func(t *testing.T) {
			lc, err := newLeanConn(srv.URL+tc.path, tc.token, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer lc.close()
			var resp bytes.Buffer
			for i := range 3 { // the same connection, or a new one after a close
				status, _, err := lc.post(context.Background(), []byte(tc.body), &resp)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if status != tc.status || resp.String() != tc.want {
					t.Fatalf("request %d: %d %.60q, want %d %.60q", i, status, resp.String(), tc.status, tc.want)
				}
				if tc.wantSeen != "" && seen.Load() != tc.wantSeen {
					t.Fatalf("server saw %q, want %q", seen.Load(), tc.wantSeen)
				}
			}
			if tc.path == "/close" && lc.c != nil {
				t.Error("connection kept after Connection: close")
			}
			if tc.path != "/close" && lc.c == nil {
				t.Error("keep-alive connection not kept")
			}
		})
	}

	t.Run("timeout", func(t *testing.T) {
		lc, err := newLeanConn(srv.URL+"/slow", "", 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		var resp bytes.Buffer
		_, _, err = lc.post(context.Background(), []byte(`{}`), &resp)
		if classify(err) != "timeout" {
			t.Fatalf("err %v classified %q, want timeout", err, classify(err))
		}
		if lc.c != nil {
			t.Error("connection kept after a timeout")
		}
	})
}

// A server that closes a kept-alive connection while it is idle costs the
// next request one redial, not an error; on a fresh connection the same
// failure is an error.
func TestLeanConnRedialsAConnectionClosedWhileIdle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepts atomic.Int32
	silentClose := make(chan bool, 4) // per connection: answer, or close without a word
	closed := make(chan struct{}, 4)  // one per connection the server has closed
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			answer := <-silentClose
			go func() {
				defer func() { c.Close(); closed <- struct{}{} }()
				r := bufio.NewReader(c)
				req, err := http.ReadRequest(r)
				if err != nil || !answer {
					return
				}
				io.Copy(io.Discard, req.Body)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				// then close, as an idle timeout would, without saying so
			}()
		}
	}()
	lc, err := newLeanConn("http://"+ln.Addr().String()+"/x", "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.close()
	var resp bytes.Buffer
	silentClose <- true
	silentClose <- true
	for i := range 2 {
		if status, _, err := lc.post(context.Background(), []byte("{}"), &resp); err != nil || status != 200 || resp.String() != "ok" {
			t.Fatalf("request %d: %d %q %v", i, status, resp.String(), err)
		}
		<-closed // the next request finds the connection closed, as after an idle timeout
	}
	if n := accepts.Load(); n != 2 {
		t.Fatalf("%d connections for 2 requests, want 2 (one redial)", n)
	}
	lc.close()
	silentClose <- false // a fresh connection closed before answering: an error
	if _, _, err := lc.post(context.Background(), []byte("{}"), &resp); classify(err) != "connection_reset" {
		t.Fatalf("fresh connection closed: err %v (%s), want connection_reset", err, classify(err))
	}
}

func TestReadChunked(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"3\r\nabc\r\n0\r\n\r\n", "abc", ""},
		{"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\n", "abcde", ""},
		{"A\r\n0123456789\r\n0\r\n\r\n", "0123456789", ""},
		{"zz\r\n", "", "bad chunk size"},
		{"5\r\nab", "", "EOF"},
	} {
		var dst bytes.Buffer
		err := readChunked(bufio.NewReader(strings.NewReader(tc.in)), &dst)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || dst.String() != tc.want {
			t.Errorf("%q: %q %v, want %q", tc.in, dst.String(), err, tc.want)
		}
	}
}
