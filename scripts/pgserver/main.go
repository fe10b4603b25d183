// Command pgserver runs a throwaway PostgreSQL server for shell scripts
// (the bench): it starts one (package pgtest), creates a database, prints
// that database's URL as one line on stdout, and on SIGINT or SIGTERM
// stops the server and removes its directory. A server whose pgserver is
// killed outright is still cleaned up, by pgtest's watchdog.
//
//	go build -o "$tmp/pgserver" ./scripts/pgserver
//	exec 3< <(exec "$tmp/pgserver" -fsync -db bench)
//	pgserver_pid=$!
//	read -r DATABASE_URL <&3 || { echo "no PostgreSQL server" >&2; exit 2; }
//	...
//	kill "$pgserver_pid"; wait "$pgserver_pid"   # the server is gone after the wait
//
// `go run ./scripts/pgserver` works too: killing `go run` leaves pgserver
// orphaned, so on Linux pgserver stops when its parent dies; but `wait`
// then returns before the server is gone.
//
// Flags: -db NAME (default refundkit), -fsync (keep fsync on, for
// measuring durable writes; off by default, for speed).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
)

func main() {
	os.Exit(run())
}

func run() int {
	db := flag.String("db", "refundkit", "name of the database whose URL is printed")
	fsync := flag.Bool("fsync", false, "keep fsync on (durable writes, slower)")
	flag.Parse()

	// Registered before starting, so a signal during the start is not lost.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopWithParent()

	srv, err := pgtest.Start(pgtest.Options{Fsync: *fsync})
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgserver: %v\n", err)
		return 1
	}
	url, err := srv.CreateDB(ctx, *db)
	if err == nil {
		_, err = fmt.Println(url)
	}
	if err == nil {
		<-ctx.Done()
	}
	if serr := srv.Stop(); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgserver: %v\n", err)
		return 1
	}
	return 0
}
