package natsjs

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// EventsBucket opens, creating it when missing, the key-value bucket
// beside the checkpoint that keeps provider's webhook deliveries
// (refundkit_NAME_stripe_events; package natsstore reads and writes it),
// refused unless its acknowledged writes survive a kill -9 of the server,
// as the checkpoint's own streams are.
func (c *Checkpoint) EventsBucket(ctx context.Context, provider string) (jetstream.KeyValue, error) {
	bucket := bucketName(c.loc.name + "_" + provider + "_events")
	kv, err := c.js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = c.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      bucket,
			Description: "refundkit checkpoint " + c.loc.name + ": " + provider + "'s webhook deliveries",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    c.loc.replicas,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = c.js.KeyValue(ctx, bucket) // another receiver made it first
		}
	}
	if err != nil {
		return nil, c.Wrap("open bucket "+bucket, err)
	}
	st, err := c.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, c.Wrap("open bucket "+bucket, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, c.Wrap("open bucket "+bucket, err)
	}
	if err := c.checkDurable(ctx, info.Config); err != nil {
		return nil, err
	}
	return kv, nil
}
