package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
)

// tokenCodec signs the opaque tokens the API hands out (page tokens, task
// tokens) so that a client can neither forge nor alter one, nor use one
// issued to another tenant or for another request. A token is
// base64url(payload) "." base64url(HMAC-SHA256(key, purpose, tenant,
// payload)). Servers that serve the same tenants must share the key.
type tokenCodec struct {
	key []byte
}

func (c tokenCodec) mac(purpose, tenant string, payload []byte) []byte {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(tenant))
	m.Write([]byte{0})
	m.Write(payload)
	return m.Sum(nil)
}

// seal encodes v as a token for one purpose and tenant.
func (c tokenCodec) seal(purpose, tenant string, v any) (string, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(payload) + "." +
		base64.RawURLEncoding.EncodeToString(c.mac(purpose, tenant, payload)), nil
}

// open decodes a token sealed for purpose and tenant into v; false when it
// is malformed, altered, or was sealed for another purpose or tenant.
func (c tokenCodec) open(purpose, tenant, token string, v any) bool {
	body, sig, ok := strings.Cut(token, ".")
	if !ok {
		return false
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(body)
	mac, err2 := base64.RawURLEncoding.DecodeString(sig)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, c.mac(purpose, tenant, payload)) {
		return false
	}
	return json.Unmarshal(payload, v) == nil
}

// pageToken is the one page token of every listing: the store's keyset
// position after the page's last row, sealed (tokenCodec) for the
// procedure and tenant, and bound to the request that started the listing:
// Query is a digest of the request's criteria (everything but the page
// size and token). The store trusts the position it is given; the seal is
// what keeps a client from forging one or carrying it to another tenant,
// listing or filter.
type pageToken struct {
	Query []byte `json:"q"`
	// Key is the last row's text key: tenant id (tenants, usage, janitor
	// runs across tenants), definition name.
	Key string `json:"k,omitempty"`
	// At is the last row's time key, in Unix milliseconds: an instance's
	// order column, a janitor run's start.
	At int64 `json:"t,omitempty"`
	// ID is the last row's id: instance id, definition version, janitor
	// run id.
	ID string `json:"i,omitempty"`
}

// queryDigest hashes the criteria of a listing request: the proto messages
// given, deterministically marshalled.
func queryDigest(parts ...proto.Message) []byte {
	h := sha256.New()
	opts := proto.MarshalOptions{Deterministic: true}
	for _, p := range parts {
		b, _ := opts.Marshal(p)
		var n [8]byte
		for i := range n {
			n[i] = byte(len(b) >> (8 * i))
		}
		h.Write(n[:])
		h.Write(b)
	}
	return h.Sum(nil)[:16]
}

// sealPage returns the page token continuing a listing of procedure.
func (c tokenCodec) sealPage(procedure, tenant string, t pageToken) (string, error) {
	return c.seal("page:"+procedure, tenant, t)
}

// openPage decodes a page token of procedure for tenant whose query digest
// is query; a token that is not one is an InvalidArgument on page_token.
func (c tokenCodec) openPage(procedure, tenant, token string, query []byte) (*pageToken, error) {
	var t pageToken
	if !c.open("page:"+procedure, tenant, token, &t) || !hmac.Equal(t.Query, query) {
		return nil, fieldError("page_token", "not a page token of this listing: it is malformed, altered, "+
			"or was issued for another tenant or other criteria")
	}
	return &t, nil
}

// taskToken is what a worker holds for a leased activity task: the store's
// lease and what the completion message needs.
type taskToken struct {
	ID          string `json:"id"`
	Lock        string `json:"l"`
	InstanceID  string `json:"in"`
	ExecutionID int64  `json:"e"`
	ActivityID  int64  `json:"a"`
	Attempt     int    `json:"n"`
	// LeaseMillis is the lease duration asked at poll: a heartbeat's default.
	LeaseMillis int64 `json:"d"`
}

func (t *taskToken) lease() time.Duration { return time.Duration(t.LeaseMillis) * time.Millisecond }

func (c tokenCodec) sealTask(tenant string, t *taskToken) (string, error) {
	return c.seal("task", tenant, t)
}

// openTask decodes a task token of tenant; one sealed for another tenant,
// forged or altered is an InvalidArgument on task_token, so that a worker
// can never name another tenant's task.
func (c tokenCodec) openTask(tenant, token string) (*taskToken, error) {
	var t taskToken
	if !c.open("task", tenant, token, &t) || t.ID == "" || t.Lock == "" {
		return nil, fieldError("task_token", "not a task token of this tenant: it is malformed, altered, or was issued to another tenant")
	}
	return &t, nil
}
