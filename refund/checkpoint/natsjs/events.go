package natsjs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoEvents is EventsBucket's error when the bucket is missing and was
// not to be created: no receiver kept anything there.
var ErrNoEvents = errors.New("no webhook deliveries kept here")

// EventsBucket opens (creating it when missing, with create) the key-value bucket
// beside the checkpoint that keeps provider's webhook deliveries
// (refundkit_NAME_stripe_events; package natsstore reads and writes it),
// refused unless its acknowledged writes survive a kill -9 of the server,
// as the checkpoint's own streams are.
func (c *Checkpoint) EventsBucket(ctx context.Context, provider string, create bool) (jetstream.KeyValue, error) {
	bucket := bucketName(c.loc.name + "_" + provider + "_events")
	kv, st, err := c.openBucket(ctx, bucket, provider+eventsWhat, create)
	if err != nil {
		return nil, err
	}
	if kv == nil {
		return nil, &ConfigError{URL: c.loc.redacted, Err: fmt.Errorf("%w: no bucket %s (is this the checkpoint the receiver keeps %s's events beside?)", ErrNoEvents, bucket, provider)}
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, c.Wrap("open bucket "+bucket, err)
	}
	if !isEventsBucket(info.Config) {
		return nil, &ConfigError{URL: c.loc.redacted, Err: fmt.Errorf("bucket %s is not where webhook deliveries are kept (%s): another checkpoint is named %s", bucket, cmp.Or(info.Config.Description, "no description"), c.loc.name+"_"+provider+"_events")}
	}
	if err := c.checkDurable(ctx, info.Config); err != nil {
		return nil, err
	}
	return kv, nil
}

// eventsWhat ends the description of every bucket of deliveries, which
// tells one from a checkpoint's own (a checkpoint may be named
// NAME_stripe_events).
const eventsWhat = "'s webhook deliveries"

func isEventsBucket(cfg jetstream.StreamConfig) bool {
	return strings.HasPrefix(cfg.Description, "refundkit checkpoint ") && strings.HasSuffix(cfg.Description, eventsWhat)
}
