package sdk

import (
	"bytes"
	"io"
	"net/http"

	"connectrpc.com/connect"
)

// maxOneWriteBody bounds the request bodies oneWrite copies: the API's
// messages are mostly a few hundred bytes; a large payload gains nothing.
const maxOneWriteBody = 64 << 10

// oneWrite sends a unary call's headers and body in one write over
// HTTP/1.1. net/http writes the headers of a request apart from its body,
// to flush them before a body that may block, unless the body is one of
// the in-memory readers it knows; Connect's unary bodies are in memory but
// of their own type, so each call cost two writes (two TCP segments, and
// two reads for the server). oneWrite copies the body into a bytes.Reader,
// which net/http knows.
type oneWrite struct{ next connect.HTTPClient }

func (c oneWrite) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength <= 0 || req.ContentLength > maxOneWriteBody {
		return c.next.Do(req)
	}
	body := make([]byte, req.ContentLength)
	_, err := io.ReadFull(req.Body, body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	r := req.WithContext(req.Context()) // a shallow copy: the caller's request is not changed
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return c.next.Do(r)
}
