package sdk_test

// These examples need a server (E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL), so
// they are compiled but not run by `go test`.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// Create a sandbox, run a command and kill the sandbox.
func Example() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, nil) // configured by E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(ctx)

	if _, err := sbx.Files.Write(ctx, "hello.py", []byte(`print("hi from the sandbox")`), nil); err != nil {
		log.Fatal(err)
	}
	res, err := sbx.Commands.Run(ctx, "python3 hello.py", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
}

func ExampleCreate() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, &sdk.CreateOptions{
		Template: "base",
		Timeout:  10 * time.Minute,
		Metadata: map[string]string{"user": "alice"},
		Envs:     map[string]string{"MODE": "demo"},
		ConnectionOptions: sdk.ConnectionOptions{
			APIKey: os.Getenv("CUBBY_KEY"),
			APIURL: "http://127.0.0.1:3000", SandboxURL: "http://127.0.0.1:3000",
		},
	})
	var auth *sdk.AuthenticationError
	switch {
	case errors.As(err, &auth):
		log.Fatalf("check the API key: %v", err)
	case err != nil:
		log.Fatal(err)
	}
	defer sbx.Kill(ctx)
	fmt.Println("created", sbx.ID())
}

func ExampleConnect() {
	ctx := context.Background()
	sbx, err := sdk.Connect(ctx, "i3k0abcdefghij123456", &sdk.ConnectOptions{Timeout: 5 * time.Minute})
	if errors.Is(err, sdk.ErrNotFound) {
		log.Fatal("the sandbox is gone")
	} else if err != nil {
		log.Fatal(err)
	}
	defer sbx.Close()
	info, err := sbx.GetInfo(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.State, "until", info.EndAt)
}

func ExampleList() {
	ctx := context.Background()
	for info, err := range sdk.List(ctx, &sdk.ListOptions{Metadata: map[string]string{"user": "alice"}}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(info.SandboxID, info.State, info.StartedAt)
	}
}

func ExampleSandboxPaginator() {
	ctx := context.Background()
	p := sdk.NewSandboxPaginator(&sdk.ListOptions{State: []sdk.SandboxState{sdk.StateRunning}, Limit: 10})
	for p.HasNext() {
		page, err := p.NextItems(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(len(page), "sandboxes; next token", p.NextToken())
	}
}

func ExampleSandbox_RunCode() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, &sdk.CreateOptions{Template: "code-interpreter"})
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(ctx)

	if _, err := sbx.RunCode(ctx, "x = 21", nil); err != nil {
		log.Fatal(err)
	}
	exec, err := sbx.RunCode(ctx, "print('doubling'); x * 2", &sdk.RunCodeOptions{
		OnStdout: func(m sdk.OutputMessage) { fmt.Print("stdout: ", m.Line) },
		Timeout:  30 * time.Second,
	})
	if err != nil {
		log.Fatal(err) // transport, timeout or sandbox errors
	}
	if exec.Error != nil {
		log.Fatalf("the cell raised %s: %s", exec.Error.Name, exec.Error.Value)
	}
	fmt.Println("result:", exec.Text())
}

// Charts come back as PNG and as structured data.
func ExampleSandbox_RunCode_chart() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, &sdk.CreateOptions{Template: "code-interpreter"})
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(ctx)
	exec, err := sbx.RunCode(ctx, "import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])\nplt.show()", nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range exec.Results {
		if png, _ := r.PNGBytes(); png != nil {
			_ = os.WriteFile("chart.png", png, 0o644)
		}
		if bar, ok := r.Chart.(*sdk.BarChart); ok {
			for _, b := range bar.Elements {
				fmt.Println(b.Label, b.Value)
			}
		}
	}
}

func ExampleSandbox_CreateCodeContext() {
	ctx := context.Background()
	sbx, err := sdk.Connect(ctx, "i3k0abcdefghij123456", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Close()
	cc, err := sbx.CreateCodeContext(ctx, &sdk.CodeContextOptions{Language: "python", Cwd: "/tmp"})
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.RemoveCodeContext(ctx, cc.ID)
	exec, err := sbx.RunCode(ctx, "import os; os.getcwd()", &sdk.RunCodeOptions{Context: cc})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(exec.Text())
}

func ExampleCommands_Run() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(ctx)
	res, err := sbx.Commands.Run(ctx, "ls /nonexistent", &sdk.CommandOptions{
		Cwd:      "/tmp",
		Envs:     map[string]string{"LC_ALL": "C"},
		OnStderr: func(s string) { fmt.Print("stderr: ", s) },
	})
	var exit *sdk.CommandExitError
	if errors.As(err, &exit) {
		fmt.Println("exit code", exit.ExitCode)
		return
	} else if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
}

func ExampleCommands_Start() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(ctx)
	h, err := sbx.Commands.Start(ctx, "cat | tr a-z A-Z", &sdk.CommandOptions{Stdin: true})
	if err != nil {
		log.Fatal(err)
	}
	_ = h.SendStdin(ctx, []byte("hello\n"))
	_ = h.CloseStdin(ctx)
	res, err := h.Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout) // HELLO
}

func ExampleFilesystem_WriteFiles() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(ctx)
	infos, err := sbx.Files.WriteFiles(ctx, []sdk.WriteEntry{
		{Path: "project/main.py", Data: []byte("print('main')\n")},
		{Path: "project/data.csv", Reader: strings.NewReader("a,b\n1,2\n")},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, wi := range infos {
		fmt.Println(wi.Path)
	}
	entries, err := sbx.Files.List(ctx, "project", &sdk.ListDirOptions{Depth: 2})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Println(e.Type, e.Path, e.Size)
	}
}

func ExampleFilesystem_WatchDir() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(ctx)
	w, err := sbx.Files.WatchDir(ctx, "/home/user", &sdk.WatchOptions{Recursive: true, Timeout: sdk.NoTimeout})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	go sbx.Files.Write(ctx, "notes/todo.txt", []byte("write docs"), nil)
	for ev := range w.Events() {
		fmt.Println(ev.Type, ev.Name)
		if ev.Name == "notes/todo.txt" {
			break
		}
	}
}

func ExamplePty_Create() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(ctx)
	term, err := sbx.Pty.Create(ctx, sdk.PtySize{Cols: 120, Rows: 40}, func(b []byte) { os.Stdout.Write(b) }, nil)
	if err != nil {
		log.Fatal(err)
	}
	_ = sbx.Pty.SendInput(ctx, term.PID(), []byte("ls -la; exit\n"))
	_ = sbx.Pty.Resize(ctx, term.PID(), sdk.PtySize{Cols: 80, Rows: 24})
	_, _ = term.Wait(ctx)
}

func ExampleSandbox_DownloadURL() {
	ctx := context.Background()
	sbx, err := sdk.Create(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Kill(ctx)
	if _, err := sbx.Files.Write(ctx, "report.txt", []byte("done"), nil); err != nil {
		log.Fatal(err)
	}
	// A signed URL anyone can GET without headers, valid for ten minutes.
	url, err := sbx.DownloadURL("report.txt", &sdk.FileURLOptions{Expiration: 10 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(url)
}

func ExampleTimeoutError() {
	ctx := context.Background()
	sbx, err := sdk.Connect(ctx, "i3k0abcdefghij123456", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer sbx.Close()
	_, err = sbx.Commands.Run(ctx, "sleep 600", &sdk.CommandOptions{Timeout: time.Minute})
	var te *sdk.TimeoutError
	switch {
	case errors.Is(err, sdk.ErrSandboxKilled):
		fmt.Println("the sandbox died:", err)
	case errors.As(err, &te):
		fmt.Println("too slow:", err)
	}
}
