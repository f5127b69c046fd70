// Package client is a Go client of the sandbox-runtime v1 API (docs/protocol.md):
// managed commands, their event streams over NDJSON and WebSocket, stdin,
// signals, terminals and files.
//
// Streams resume by themselves. Follow and Run re-open an output stream
// after every window (the daemon closes one after max_wait, the broker
// every 20 s) and after any disconnect, from the next_cursor of the last
// event they processed, so every byte reaches the caller exactly once as
// long as the daemon still holds it (otherwise the caller gets a gap event).
// A partial line cut off by a disconnect is dropped and read again.
//
// Requests that are safe to repeat (reads, waits, kill, resize, and a
// create that carries a command_id, which Run and Start always send) are
// retried after transport errors (reads, waits and kill also when the
// answer breaks off after its headers), the first WebSocket dial of Attach
// too, and after 502/503/504 answers for up to
// Options.RetryFor without progress (but a refused connection before the
// daemon has ever answered this Client fails at once: nothing is listening
// there). Requests that are not safe to repeat
// (a signal, a stdin write, a file upload, a create without id) are sent
// once: when the connection fails, the caller gets the error and cannot
// know whether the daemon acted on it.
//
// A Client is safe for concurrent use. Cancelling a context stops the
// client's work, never the command: only Kill, the command's timeout and
// the daemon's shutdown end a command.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// DefaultURL is where the daemon listens inside a sandbox.
const DefaultURL = "http://127.0.0.1:8888"

const (
	// defaultRetryFor is how long a request or a followed stream keeps
	// retrying without progress before it gives up.
	defaultRetryFor = 30 * time.Second
	// streamWindow is the max_wait asked of every output stream: the
	// longest the daemon allows, so that re-opens are rare.
	streamWindow = 60
	// waitClamp is the longest ?wait= the daemon honours.
	waitClamp = 20 * time.Second
	// idleTimeout ends a stream (which is then re-opened) that has been
	// silent for this long: the daemon sends a heartbeat after 10 s of
	// silence, so a longer silence is a connection that died without a
	// reset, e.g. behind a proxy.
	idleTimeout = 35 * time.Second
	// backoffMin and backoffMax bound the pause between two attempts.
	backoffMin = 20 * time.Millisecond
	backoffMax = time.Second
	// maxErrorBody is how much of a non-JSON error answer is quoted.
	maxErrorBody = 512
)

// Options configure a Client. The zero value is usable.
type Options struct {
	// Token is sent as "Authorization: Bearer <token>" when not empty.
	Token string
	// HTTPClient sends the requests; nil: a client of its own with no
	// overall timeout (streams and waits are long) and a 30 s limit on
	// response headers.
	HTTPClient *http.Client
	// RetryFor is how long a request, a wait or a followed stream keeps
	// retrying without progress; 0: 30 s; negative: never retry.
	RetryFor time.Duration
}

// Client talks to one daemon. Create it with New.
type Client struct {
	base     *url.URL
	token    string
	hc       *http.Client
	retryFor time.Duration
	dialer   *net.Dialer
	// reached is set once the daemon has answered: until then a refused
	// connection is an error at once (nothing is listening), not a blip.
	reached atomic.Bool
}

// New returns a client of the daemon at baseURL ("http://host:port", an
// optional path prefix kept; "" is DefaultURL).
func New(baseURL string, o Options) (*Client, error) {
	if baseURL == "" {
		baseURL = DefaultURL
	}
	u, err := url.Parse(baseURL)
	if err != nil && !strings.Contains(baseURL, "://") {
		return nil, fmt.Errorf("the URL %q must start with http:// or https://, e.g. http://%s", redact(baseURL), redact(baseURL))
	}
	if err != nil {
		return nil, fmt.Errorf("the URL %q does not parse", redact(baseURL))
	}
	if !strings.Contains(baseURL, "://") {
		return nil, fmt.Errorf("the URL %q must start with http:// or https://, e.g. http://%s", redact(baseURL), redact(baseURL))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("the URL %q must start with http:// or https://", baseURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("the URL %q names no host", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("the URL %q must not have a query or fragment", baseURL)
	}
	if o.Token != "" {
		// A token no header can carry fails every request the same way;
		// refused here, never retried (the error never shows it).
		if err := wire.CheckToken(o.Token); err != nil {
			return nil, fmt.Errorf("unusable token: %v", err)
		}
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	c := &Client{base: u, token: o.Token, hc: o.HTTPClient, retryFor: o.RetryFor, dialer: &net.Dialer{Timeout: 10 * time.Second}}
	if c.retryFor == 0 {
		c.retryFor = defaultRetryFor
	}
	if c.hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = c.dialer.DialContext
		tr.ResponseHeaderTimeout = 30 * time.Second
		tr.Proxy = nil // the daemon is local or reached through a known URL
		c.hc = &http.Client{Transport: tr}
	}
	return c, nil
}

// URL returns the daemon's base URL, a password in it shown as "xxxxx"
// (for messages).
func (c *Client) URL() string { return c.base.Redacted() }

// Error is an error answer of the daemon (or of something in front of it).
type Error struct {
	StatusCode int    // the HTTP status
	Code       string // wire.Code…; "" when the body was not a v1 error
	Message    string // the daemon's message, or a description of the body
	Reason     string // for gone: wire.GoneExpired or wire.GoneEvicted
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("HTTP %d: %s", e.StatusCode, e.Message)
	}
	return fmt.Sprintf("%s (%d %s)", e.Message, e.StatusCode, e.Code)
}

// ErrorCode returns the wire code of err when it is (or wraps) an *Error,
// else "".
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// ErrIsDirectory is returned by ReadFile when the path is a directory.
var ErrIsDirectory = errors.New("is a directory")

// ErrStreamBroken is wrapped by errors about a stream that broke the
// protocol (an output event out of order, a line that is not JSON). It is
// a bug of the daemon or of a proxy; the stream is not resumed.
var ErrStreamBroken = errors.New("the event stream broke the protocol")

// request is one HTTP request, described so that it can be sent again.
type request struct {
	method string
	path   string // below the base URL, already escaped
	query  url.Values
	body   []byte // JSON; nil: no body
	// idempotent requests are retried after transport errors and 502/503/504.
	idempotent bool
}

func (c *Client) newHTTPRequest(ctx context.Context, r request) (*http.Request, error) {
	u := *c.base
	u.RawPath = c.base.Path + r.path
	p, err := url.PathUnescape(u.RawPath)
	if err != nil {
		return nil, err
	}
	u.Path = p
	u.RawQuery = r.query.Encode()
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, err
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.authorize(req.Header)
	return req, nil
}

func (c *Client) authorize(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
}

// send sends r, retrying as its kind allows, and returns a 2xx response
// (whose body the caller closes) or an error (*Error for an answer).
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	var b backoff
	deadline := time.Now().Add(c.retryFor)
	for {
		req, err := c.newHTTPRequest(ctx, r)
		if err != nil {
			return nil, err
		}
		resp, err := c.hc.Do(req)
		if err == nil {
			c.reached.Store(true)
		}
		if err == nil && resp.StatusCode/100 == 2 {
			return resp, nil
		}
		if err == nil {
			err = readError(resp)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		refusedAtFirst := !c.reached.Load() && errors.Is(err, syscall.ECONNREFUSED)
		if !r.idempotent || !retryable(err) || refusedAtFirst || time.Now().After(deadline) {
			return nil, c.describe(err)
		}
		if err := b.wait(ctx, retryAfter(err)); err != nil {
			return nil, err
		}
	}
}

// retryable reports whether err may go away by itself: a transport error,
// or a 502/503/504 that is not the daemon shutting down.
func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		switch e.StatusCode {
		case http.StatusBadGateway, http.StatusGatewayTimeout:
			return true
		case http.StatusServiceUnavailable:
			return e.Code != wire.CodeShuttingDown
		}
		return false
	}
	// A request that can never succeed is not retried: a certificate
	// the client does not trust, or a TLS handshake with a plain HTTP
	// server, fails the same way every time.
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	var badCert x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var notTLS tls.RecordHeaderError
	if errors.As(err, &unknownCA) || errors.As(err, &badHost) || errors.As(err, &badCert) || errors.As(err, &verify) || errors.As(err, &notTLS) {
		return false
	}
	return !errors.Is(err, ErrStreamBroken)
}

func retryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// describe turns a transport error into one that names the daemon.
func (c *Client) describe(err error) error {
	var e *Error
	if errors.As(err, &e) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &TransportError{URL: c.base.Redacted(), Err: redactErr{err, c.base}}
}

// redact hides the password of a URL given as text, parsed or not.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	if i, j := strings.Index(s, "://"), strings.LastIndex(s, "@"); i >= 0 && j > i {
		if k := strings.Index(s[i+3:j], ":"); k >= 0 {
			return s[:i+3+k+1] + "xxxxx" + s[j:]
		}
	}
	return s
}

// redactErr is an error whose text shows base's password as "xxxxx" (a
// *url.Error quotes the whole request URL).
type redactErr struct {
	err  error
	base *url.URL
}

func (e redactErr) Error() string {
	s := e.err.Error()
	if p, ok := e.base.User.Password(); ok && p != "" {
		s = strings.ReplaceAll(s, ":"+url.UserPassword("", p).String()[1:], ":xxxxx")
		s = strings.ReplaceAll(s, ":"+p+"@", ":xxxxx@")
	}
	return s
}
func (e redactErr) Unwrap() error { return e.err }

// TransportError is a failure to reach the daemon or to read its answer.
type TransportError struct {
	URL string
	Err error
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("talking to the sandbox runtime at %s: %v", e.URL, e.Err)
}
func (e *TransportError) Unwrap() error { return e.Err }

// readError reads a non-2xx answer and closes its body.
func readError(resp *http.Response) error {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{StatusCode: resp.StatusCode}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	var eb wire.ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		e.Code, e.Message, e.Reason = eb.Error.Code, eb.Error.Message, eb.Error.Reason
		return e
	}
	var legacy struct {
		Detail any `json:"detail"`
	}
	if json.Unmarshal(body, &legacy) == nil && legacy.Detail != nil {
		e.Message = fmt.Sprint(legacy.Detail)
		return e
	}
	text := strings.TrimSpace(string(body))
	if len(text) > maxErrorBody {
		text = text[:maxErrorBody] + "…"
	}
	if text == "" {
		text = http.StatusText(resp.StatusCode)
	}
	e.Message = text
	return e
}

// do sends r and decodes the JSON answer into out (when not nil).
func (c *Client) do(ctx context.Context, r request, out any) error {
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return c.describe(fmt.Errorf("reading the answer to %s %s: %w", r.method, r.path, err))
	}
	return nil
}

// doRetrying is do, retrying a body that breaks off too (for idempotent
// requests whose answer arrives late, like a wait).
func (c *Client) doRetrying(ctx context.Context, r request, out any) error {
	var b backoff
	var deadline time.Time // from the first failure: a wait may be long
	for {
		err := c.do(ctx, r, out)
		if deadline.IsZero() {
			deadline = time.Now().Add(c.retryFor)
		}
		var te *TransportError
		refusedAtFirst := !c.reached.Load() && errors.Is(err, syscall.ECONNREFUSED)
		if err == nil || !errors.As(err, &te) || !retryable(err) || refusedAtFirst || c.retryFor < 0 || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		if err := b.wait(ctx, 0); err != nil {
			return err
		}
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // wire types always encode
	}
	return b
}

func commandPath(id string, parts ...string) string {
	p := "/v1/commands/" + url.PathEscape(id)
	for _, s := range parts {
		p += "/" + s
	}
	return p
}

// backoff paces retries: backoffMin doubling up to backoffMax, or the
// server's Retry-After when it gave one.
type backoff struct{ d time.Duration }

func (b *backoff) wait(ctx context.Context, hint time.Duration) error {
	if b.d == 0 {
		b.d = backoffMin
	}
	d := b.d
	if hint > 0 {
		d = hint
	}
	b.d = min(2*b.d, backoffMax)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *backoff) reset() { b.d = 0 }

// Health returns the daemon's health: nil when it answers ok.
func (c *Client) Health(ctx context.Context) error {
	return c.doRetrying(ctx, request{method: "GET", path: "/v1/health", idempotent: true}, nil)
}

// Info returns the daemon's version, limits and features.
func (c *Client) Info(ctx context.Context) (*wire.Info, error) {
	var info wire.Info
	if err := c.doRetrying(ctx, request{method: "GET", path: "/v1/info", idempotent: true}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}
