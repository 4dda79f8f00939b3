package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/orchardhq/orchard/pkg/sdk"
)

// These examples need an Orchard API server (`orchard dev` serves one on
// localhost:8080 and prints tokens), so they compile but do not run as
// tests; the system tests run the same calls against a real server.

func ExampleNewClient() {
	// The token comes from ORCHARD_TOKEN unless WithToken gives one.
	client := sdk.NewClient("http://localhost:8080",
		sdk.WithToken(os.Getenv("ORCHARD_CLIENT_TOKEN")),
		sdk.WithRetryPolicy(sdk.RetryPolicy{MaxAttempts: 3}))
	_ = client
}

func ExampleClient_Start() {
	ctx := context.Background()
	client := sdk.NewClient("http://localhost:8080")

	type order struct {
		ID    string  `json:"order_id"`
		Total float64 `json:"total"`
	}
	// Choosing the instance id makes the start safe to retry.
	id, err := client.Start(ctx, "order-fulfilment", order{ID: "o-1001", Total: 42.5},
		sdk.WithInstanceID("order-o-1001"),
		sdk.WithTags(map[string]string{"customer": "c-17"}))
	if errors.Is(err, sdk.ErrAlreadyExists) {
		log.Fatal("another instance has that id")
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("started", id)
}

func ExampleClient_Wait() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	client := sdk.NewClient("http://localhost:8080")

	in, err := client.Wait(ctx, "order-o-1001")
	if err != nil {
		log.Fatal(err)
	}
	switch in.Status {
	case sdk.StatusCompleted:
		var out struct {
			Shipped bool `json:"shipped"`
		}
		if err := in.DecodeOutput(&out); err != nil {
			log.Fatal(err)
		}
		fmt.Println("shipped:", out.Shipped)
	default:
		fmt.Println(in.Status, in.Error)
	}
}

func ExampleClient_List() {
	ctx := context.Background()
	client := sdk.NewClient("http://localhost:8080")

	// Every failed instance of the last day, every page.
	failed := sdk.Filter{
		Statuses:       []sdk.Status{sdk.StatusFailed},
		CompletedAfter: new(time.Now().Add(-24 * time.Hour)),
	}
	for in, err := range client.List(ctx, failed, sdk.WithOrder(sdk.RecentlyUpdatedFirst)) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(in.ID, in.Name, in.Error)
	}
}

func ExampleClient_Delete() {
	ctx := context.Background()
	client := sdk.NewClient("http://localhost:8080")

	counts, err := client.Delete(ctx, "order-o-1001", false)
	switch {
	case errors.Is(err, sdk.ErrRunning):
		fmt.Println("still running: cancel it, or delete with force")
	case errors.Is(err, sdk.ErrSubOrchestration):
		fmt.Println("a sub-orchestration: delete its root")
	case errors.Is(err, sdk.ErrNotFound):
		fmt.Println("already gone")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Printf("deleted %d instances, %d events\n", counts.Instances, counts.Events)
	}
}

func ExampleClient_DeleteMany() {
	ctx := context.Background()
	client := sdk.NewClient("http://localhost:8080")

	// Every terminal root instance that ended more than 30 days ago, with
	// its tree, 500 trees per call.
	total, err := client.DeleteMany(ctx,
		sdk.DeleteSelection{CompletedBefore: new(time.Now().Add(-30 * 24 * time.Hour))},
		sdk.WithBatchSize(500),
		sdk.WithDeleteProgress(func(sofar sdk.DeleteCounts) {
			fmt.Printf("\rdeleted %d instances", sofar.Instances)
		}))
	if err != nil {
		log.Fatalf("stopped after %d instances: %v", total.Instances, err)
	}
	fmt.Printf("\ndone: %d instances, %d executions, %d events\n", total.Instances, total.Executions, total.Events)
}

func ExampleClient_PruneMany() {
	ctx := context.Background()
	client := sdk.NewClient("http://localhost:8080")

	// Keep the last 10 executions of every "poller" chain.
	total, err := client.PruneMany(ctx, sdk.Filter{Name: "poller"}, sdk.PruneOptions{KeepLast: 10})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pruned", total.Executions, "executions")
}

func ExampleClient_RegisterDefinition() {
	ctx := context.Background()
	client := sdk.NewClient("http://localhost:8080") // a tenant-admin token

	doc, err := os.ReadFile("order_fulfilment.yaml")
	if err != nil {
		log.Fatal(err)
	}
	reg, err := client.RegisterDefinition(ctx, doc)
	var apiErr *sdk.Error
	if errors.Is(err, sdk.ErrInvalidArgument) && errors.As(err, &apiErr) {
		for _, v := range apiErr.FieldViolations {
			fmt.Printf("%s: %s\n", v.Field, v.Description)
		}
		os.Exit(1)
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("registered", reg.Name, reg.Version, "new:", reg.Created)
}

func ExampleWorker() {
	client := sdk.NewClient("http://localhost:8080") // a worker token
	w := sdk.NewWorker(client, "payments", sdk.WithConcurrency(16))

	type charge struct {
		Order  string  `json:"order"`
		Amount float64 `json:"amount"`
	}
	type receipt struct {
		ID string `json:"id"`
	}
	sdk.Register(w, "charge-card", func(ctx context.Context, c charge) (receipt, error) {
		if c.Amount <= 0 {
			// No retry can fix this input.
			return receipt{}, sdk.NonRetryable(fmt.Errorf("order %s: amount %v", c.Order, c.Amount))
		}
		// ctx ends when the task is cancelled (a race lost, a timeout, the
		// instance cancelled) or lost: stop working then.
		return receipt{ID: "r-" + c.Order}, nil
	})

	// Run until SIGTERM, then let the running handlers finish (30s).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

func ExampleWorker_Stop() {
	client := sdk.NewClient("http://localhost:8080")
	w := sdk.NewWorker(client, "media")
	sdk.Register(w, "resize", func(ctx context.Context, url string) (string, error) {
		return url + "?w=256", nil
	})
	go func() {
		if err := w.Run(context.Background()); err != nil {
			log.Print(err)
		}
	}()

	// Later: stop polling, and give running handlers a minute to finish
	// before their contexts are cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		log.Print("handlers were cancelled: ", err)
	}
}

func ExampleActivityError() {
	out := &sdk.ActivityError{
		Kind:         "OutOfStock",
		Message:      "no apples left",
		Details:      map[string]int{"left": 0},
		NonRetryable: true,
	}
	var err error = fmt.Errorf("reserve: %w", out)
	fmt.Println(err)
	fmt.Println("retryable:", !sdk.IsNonRetryable(err))
	// Output:
	// reserve: OutOfStock: no apples left
	// retryable: false
}

func ExampleNonRetryable() {
	err := sdk.NonRetryable(errors.New("invalid card number"))
	fmt.Println(err, sdk.IsNonRetryable(err))
	fmt.Println(sdk.IsNonRetryable(errors.New("timeout talking to the bank")))
	// Output:
	// invalid card number true
	// false
}
