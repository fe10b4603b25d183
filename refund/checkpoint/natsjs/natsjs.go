// Package natsjs is a refund checkpoint on NATS JetStream that many runs
// share (refund.Claims). Each item is a value of a key-value bucket and a
// message of a work-queue stream pulled through one consumer per batch,
// whose ack-wait is the claim's lease: the message is acked only once the
// outcome is stored, and a worker that stalls loses it to another. Every
// write replaces the item's value under the revision its writer last saw:
// the revision is the fence. docs/nats.md says what the server must be.
package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint"
)

// IsURL reports whether a --journal argument names a NATS JetStream
// checkpoint: nats://host:port/NAME (tls:// for TLS).
func IsURL(s string) bool { return checkpoint.IsURL(s, "nats://", "tls://") }

// Options configure a Checkpoint.
type Options = checkpoint.Options

// Checkpoint is a refund.Claims on NATS JetStream. Open makes one; Close
// ends it.
type Checkpoint struct {
	checkpoint.Base[*claim]
	loc      location
	nc       *nats.Conn
	js       jetstream.JetStream
	kv       jetstream.KeyValue // nil: read only, and the server holds no checkpoint of this name
	work     jetstream.Stream
	kvStream jetstream.Stream // the bucket's own
	presence jetstream.Stream // the live workers (presence.go); nil when read only
	opts     Options
	// startSeq is the bucket's last sequence when this run opened it: a
	// value written after it is of this run's time.
	startSeq uint64
	readOnly bool

	warnHeld  sync.Once
	batches   []*batchQueue
	cache     map[key]cached // a read-only Load's states
	link      *link          // the connection's drops and returns (outage.go)
	tallies   map[string]*tally
	budget    *Budget // ShareBudget's, ended by Close
	closeOnce sync.Once
}

type key = checkpoint.Key

// batchQueue is a batch this run works on, and its consumer.
type batchQueue struct {
	batch string
	cons  jetstream.Consumer
}

// claim is an item this run holds: the message it was delivered as, and
// the item's value as this run last wrote or read it.
type claim struct {
	checkpoint.Claim
	msg      jetstream.Msg
	rev      uint64 // the value's revision: the fence of the next write
	val      *itemValue
	payments []string  // payment keys locked for it
	lock     lockValue // what their locks hold: beaten by renew
}

// location is what a nats:// URL names: the servers, the credentials it
// holds and the checkpoint's name.
type location struct {
	servers  []string // nats://host:port each, without credentials
	user     string
	password string
	name     string
	replicas int
	monitor  string // the servers' monitoring address, to check sync_interval
	redacted string
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// parseURL reads nats://[user[:password]@]host:port[,host:port...]/NAME
// [?replicas=N&monitor=http://host:8222].
func parseURL(s string) (location, error) {
	var loc location
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || (scheme != "nats" && scheme != "tls") {
		return loc, errors.New("want nats://host:port/NAME")
	}
	rest, query, _ := strings.Cut(rest, "?")
	hosts, name, _ := strings.Cut(rest, "/")
	if at := strings.LastIndex(hosts, "@"); at >= 0 {
		info := hosts[:at]
		hosts = hosts[at+1:]
		u, p, hasPW := strings.Cut(info, ":")
		var err error
		if loc.user, err = url.PathUnescape(u); err != nil {
			return loc, errors.New("the user name does not decode")
		}
		if hasPW {
			if loc.password, err = url.PathUnescape(p); err != nil {
				return loc, errors.New("the password does not decode")
			}
		}
	}
	if hosts == "" {
		hosts = "127.0.0.1:4222"
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return loc, errors.New("an empty server address")
		}
		if !strings.Contains(h, ":") {
			h += ":4222"
		}
		loc.servers = append(loc.servers, scheme+"://"+h)
	}
	if !nameRE.MatchString(name) {
		return loc, fmt.Errorf("the checkpoint's name %q: want 1 to 64 letters, digits, _ or - after the servers (nats://host:4222/NAME)", name)
	}
	loc.name = name
	q, err := url.ParseQuery(query)
	if err != nil {
		return loc, fmt.Errorf("the query does not parse: %v", err)
	}
	loc.replicas = 1
	for k := range q {
		switch k {
		case "replicas":
			n, err := strconv.Atoi(q.Get(k))
			if err != nil || n < 1 || n > 5 {
				return loc, fmt.Errorf("replicas=%s: want 1 to 5", q.Get(k))
			}
			loc.replicas = n
		case "monitor":
			loc.monitor = q.Get(k)
		default:
			return loc, fmt.Errorf("unknown parameter %q (replicas, monitor)", k)
		}
	}
	red := scheme + "://"
	switch {
	case loc.password != "":
		red += loc.user + ":xxxxx@"
	case loc.user != "":
		// nats://TOKEN@host is how NATS URLs carry a token: a user
		// without a password is not printed either.
		red += "xxxxx@"
	}
	loc.redacted = red + hosts + "/" + name
	if query != "" {
		// The monitoring address may hold a password of its own.
		parts := strings.Split(query, "&")
		for i, part := range parts {
			if k, _, _ := strings.Cut(part, "="); k == "monitor" {
				parts[i] = "monitor=" + redactHTTP(loc.monitor)
			}
		}
		loc.redacted += "?" + strings.Join(parts, "&")
	}
	return loc, nil
}

// redactHTTP is an http URL with its password, if any, replaced by xxxxx.
func redactHTTP(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a monitoring address that does not parse)"
	}
	return u.Redacted()
}

// Redact is a nats:// URL with its password, if any, replaced by xxxxx:
// how a checkpoint is named in messages.
func Redact(s string) string {
	loc, err := parseURL(s)
	if err != nil {
		return "(a nats URL that does not parse)"
	}
	return loc.redacted
}

// The names of the JetStream assets of a checkpoint NAME.
func bucketName(name string) string { return "refundkit_" + name }
func workStream(name string) string { return "refundkit_" + name + "_work" }
func workSubject(name string) string {
	return "refundkit." + name + ".work"
}

// Open connects to rawURL's servers and opens its checkpoint; unless
// readOnly it creates what is missing, checks durability and starts renewing.
func Open(ctx context.Context, rawURL string, opts Options, readOnly bool) (_ *Checkpoint, err error) {
	loc, err := parseURL(rawURL)
	if err != nil {
		return nil, &ConfigError{URL: Redact(rawURL), Err: err}
	}
	c := &Checkpoint{loc: loc, readOnly: readOnly, link: newLink()}
	c.Init(&opts, "the NATS servers do not answer", "the NATS servers answer again", newError, c.renewClaim)
	c.opts = opts
	connOpts := []nats.Option{
		nats.Name("refundkit " + opts.Worker),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(5 * time.Second),
		// Errors of the connection are the run's to report, not the
		// client library's to print.
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
	}
	connOpts = append(connOpts, c.linkOptions()...)
	user, password := loc.user, loc.password
	if user == "" {
		user, password = os.Getenv("NATS_USER"), os.Getenv("NATS_PASSWORD")
	}
	if user != "" {
		connOpts = append(connOpts, nats.UserInfo(user, password))
		c.Secrets = append(c.Secrets, password)
	}
	if tok := os.Getenv("NATS_TOKEN"); tok != "" {
		connOpts = append(connOpts, nats.Token(tok))
		c.Secrets = append(c.Secrets, tok)
	}
	if creds := os.Getenv("NATS_CREDS"); creds != "" {
		connOpts = append(connOpts, nats.UserCredentials(creds))
	}
	if seed := os.Getenv("NATS_NKEY"); seed != "" {
		o, err := nats.NkeyOptionFromSeed(seed)
		if err != nil {
			return nil, c.Wrap("credentials", fmt.Errorf("NATS_NKEY: %w", err))
		}
		connOpts = append(connOpts, o)
	}
	c.nc, err = nats.Connect(strings.Join(loc.servers, ","), connOpts...)
	if err != nil {
		return nil, c.Wrap("connect", err)
	}
	defer func() {
		if err != nil {
			c.nc.Close()
		}
	}()
	if c.js, err = jetstream.New(c.nc); err != nil {
		return nil, c.Wrap("connect", err)
	}
	if err := c.openAssets(ctx); err != nil {
		return nil, err
	}
	if readOnly {
		return c, nil
	}
	if err := c.openPresence(ctx); err != nil {
		return nil, err
	}
	if err := c.checkName(ctx); err != nil {
		return nil, err
	}
	c.StartRenewing(func(tick bool) {
		c.renew()
		if tick {
			ctx, cancel := context.WithTimeout(context.Background(), c.Margin()/3)
			c.sayAlive(ctx)
			cancel()
		}
	})
	return c, nil
}

// openBucket finds the key-value bucket named bucket beside the checkpoint
// and its stream, creating it (holding what) when missing if create; nil
// and no error when it is missing and not created.
func (c *Checkpoint) openBucket(ctx context.Context, bucket, what string, create bool) (jetstream.KeyValue, jetstream.Stream, error) {
	kv, err := c.js.KeyValue(ctx, bucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound) && !create:
		return nil, nil, nil
	case errors.Is(err, jetstream.ErrBucketNotFound):
		kv, err = c.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      bucket,
			Description: "refundkit checkpoint " + c.loc.name + ": " + what,
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    c.loc.replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = c.js.KeyValue(ctx, bucket) // another process made it first
		}
	}
	if err != nil {
		return nil, nil, c.Wrap("open bucket "+bucket, err)
	}
	st, err := c.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, nil, c.Wrap("open bucket "+bucket, err)
	}
	return kv, st, nil
}

// openAssets finds (or, unless read only, creates) the bucket and the work
// stream, and checks their durability.
func (c *Checkpoint) openAssets(ctx context.Context) error {
	bucket := bucketName(c.loc.name)
	kv, kvStream, err := c.openBucket(ctx, bucket, "plans, items and their journal records", !c.readOnly)
	if err != nil || kv == nil {
		return err // nil kv: read only, an empty checkpoint
	}
	c.kv = kv
	c.kvStream = kvStream
	c.work, err = c.js.Stream(ctx, workStream(c.loc.name))
	if errors.Is(err, jetstream.ErrStreamNotFound) && !c.readOnly {
		c.work, err = c.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        workStream(c.loc.name),
			Description: "refundkit checkpoint " + c.loc.name + ": the items waiting for a worker",
			Subjects:    []string{workSubject(c.loc.name) + ".>"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    c.loc.replicas,
			// One message per item at most: an item queued twice would
			// be delivered to two workers at once.
			MaxMsgsPerSubject:    1,
			Discard:              jetstream.DiscardNew,
			DiscardNewPerSubject: true,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			c.work, err = c.js.Stream(ctx, workStream(c.loc.name))
		}
	}
	if err != nil && !(c.readOnly && errors.Is(err, jetstream.ErrStreamNotFound)) {
		return c.Wrap("open work stream", err)
	}
	kvInfo, err := kvStream.Info(ctx)
	if err != nil {
		return c.Wrap("open bucket "+bucket, err)
	}
	if isEventsBucket(kvInfo.Config) {
		return &ConfigError{URL: c.loc.redacted, Err: fmt.Errorf("bucket %s keeps webhook deliveries (%s), not a checkpoint: name another checkpoint", bucket, kvInfo.Config.Description)}
	}
	c.startSeq = kvInfo.State.LastSeq
	if c.readOnly {
		return nil
	}
	workInfo, err := c.work.Info(ctx)
	if err != nil {
		return c.Wrap("open work stream", err)
	}
	if !workInfo.Config.DiscardNewPerSubject || workInfo.Config.MaxMsgsPerSubject != 1 || workInfo.Config.Retention != jetstream.WorkQueuePolicy {
		return &DurabilityError{URL: c.loc.redacted, Why: fmt.Sprintf("the stream %s is not a work queue of one message per item (made by something other than refundkit?)", workInfo.Config.Name)}
	}
	return c.checkDurable(ctx, kvInfo.Config, workInfo.Config)
}

// checkDurable refuses streams whose acknowledged writes a server's kill -9
// could lose, and says what it cannot check.
func (c *Checkpoint) checkDurable(ctx context.Context, streams ...jetstream.StreamConfig) error {
	replicas := 5
	for _, s := range streams {
		if s.Storage != jetstream.FileStorage {
			return &DurabilityError{URL: c.loc.redacted, Why: fmt.Sprintf("the stream %s keeps its messages in memory: a server's restart loses them", s.Name)}
		}
		if s.PersistMode == jetstream.AsyncPersistMode {
			return &DurabilityError{URL: c.loc.redacted, Why: fmt.Sprintf("the stream %s acknowledges writes before it stores them (persist_mode async): a kill of its server loses them", s.Name)}
		}
		if why := dropsMessages(s); why != "" {
			return &DurabilityError{URL: c.loc.redacted, Why: fmt.Sprintf("the stream %s %s: what it acknowledged would go (limits set by something other than refundkit?)", s.Name, why)}
		}
		replicas = min(replicas, max(s.Replicas, 1))
	}
	if replicas >= 3 {
		return nil
	}
	if c.loc.monitor == "" {
		c.Warn(fmt.Sprintf("the checkpoint's streams have %d replica(s), and whether the server syncs every write (sync_interval: always) cannot be checked without its monitoring address (monitor=http://host:8222 in the URL): a kill -9 of the server keeps every acknowledged write, the loss of its host may lose the last ones (docs/nats.md)", replicas))
		return nil
	}
	always, err := syncAlways(ctx, c.loc.monitor)
	if err != nil {
		return c.Wrap("check sync_interval at "+redactHTTP(c.loc.monitor), err)
	}
	if !always {
		return &DurabilityError{URL: c.loc.redacted, Why: fmt.Sprintf("the server does not sync every write to disk (its sync_interval is not always) and the streams have %d replica(s) (fewer than 3): the loss of its host could lose acknowledged records. Set sync_interval: always in the server's jetstream block, or use 3 replicas", replicas)}
	}
	return nil
}

// dropsMessages says how stream s would drop messages it acknowledged
// (an age, a count or a size limit that discards old ones, per-message
// TTLs), or "". A limit that refuses new messages (discard new) loses
// nothing: the write fails, loudly.
func dropsMessages(s jetstream.StreamConfig) string {
	switch {
	case s.MaxAge > 0:
		return fmt.Sprintf("drops messages older than %s (max_age)", s.MaxAge)
	case s.MaxMsgs > 0 && s.Discard == jetstream.DiscardOld:
		return fmt.Sprintf("drops its oldest messages past %d (max_msgs, discard old)", s.MaxMsgs)
	case s.MaxBytes > 0 && s.Discard == jetstream.DiscardOld:
		return fmt.Sprintf("drops its oldest messages past %d bytes (max_bytes, discard old)", s.MaxBytes)
	case s.AllowMsgTTL:
		return "lets a message expire (allow_msg_ttl)"
	}
	return ""
}

// syncAlways asks a server's monitoring address (/varz) whether it syncs
// every write.
func syncAlways(ctx context.Context, monitor string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(monitor, "/")+"/varz", nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("/varz answered %s", resp.Status)
	}
	var varz struct {
		JetStream struct {
			Config struct {
				SyncAlways bool `json:"sync_always"`
			} `json:"config"`
		} `json:"jetstream"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&varz); err != nil {
		return false, fmt.Errorf("/varz: %v", err)
	}
	return varz.JetStream.Config.SyncAlways, nil
}

// Close stops renewing and gives the claims still held back to the queue
// at once, not after the ack-wait.
func (c *Checkpoint) Close() error {
	c.closeOnce.Do(func() {
		c.Mu.Lock()
		b := c.budget
		c.Mu.Unlock()
		b.end(true) // the others take up its part at once
		if c.StopRenewing() {
			c.Mu.Lock()
			now := time.Now()
			for _, cl := range c.Held {
				if now.Before(cl.Deadline) { // a late Nak could move another's claim (Release)
					cl.msg.Nak()
				}
			}
			c.Held = map[key]*claim{}
			c.Mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), c.Margin()/3)
			c.sayGone(ctx)
			cancel()
			c.nc.Flush()
		}
		c.Mu.Lock()
		for _, t := range c.tallies {
			t.w.Stop()
		}
		c.Mu.Unlock()
		c.nc.Close()
	})
	return nil
}

// Error is a failure of the checkpoint's servers; BusyError an import refused.
type (
	Error     = checkpoint.Error
	BusyError = checkpoint.BusyError
)

func newError(op string, err error) error { return &Error{Backend: "nats", Op: op, Err: err} }
func busy(why string) error               { return &BusyError{Backend: "nats", Why: why} }

// ConfigError is a URL that does not parse: a usage error.
type ConfigError struct {
	URL string // redacted
	Err error
}

func (e *ConfigError) Error() string { return "nats checkpoint " + e.URL + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// DurabilityError is a server or stream whose acknowledged writes could be
// lost: refundkit does not write its checkpoint there.
type DurabilityError struct {
	URL string // redacted
	Why string
}

func (e *DurabilityError) Error() string {
	return "nats checkpoint " + e.URL + " is not durable enough for refunds: " + e.Why
}

// CorruptError is a value in the checkpoint that refundkit did not write.
type CorruptError struct {
	Key string
	Err error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("nats checkpoint: the value of %s is corrupt: %v", e.Key, e.Err)
}
func (e *CorruptError) Unwrap() error { return e.Err }

var _ refund.Claims = (*Checkpoint)(nil)
