// Command tool-calling is the skeleton of an LLM agent loop whose model can
// call an `execute_python` tool, mapped onto Sandbox.RunCode. The model here is
// scripted (scriptedModel) so the example runs without any external API;
// replace it with a client of your LLM provider that implements Model.
//
//	go run ./examples/go/tool-calling
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// Message is one turn of the conversation in a provider-neutral shape.
type Message struct {
	Role       string     // "user", "assistant" or "tool"
	Content    string     // text of the turn (for "tool": the tool's result)
	ToolCalls  []ToolCall // tool calls requested by the assistant
	ToolCallID string     // for "tool": the call this answers
}

// ToolCall is a model's request to run a tool with JSON arguments.
type ToolCall struct {
	ID        string
	Name      string
	Arguments json.RawMessage
}

// Tool describes a tool to the model (name, description, JSON schema).
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// Model is what an LLM client must provide: the next assistant message for
// a conversation and the tools on offer.
type Model interface {
	Next(ctx context.Context, history []Message, tools []Tool) (Message, error)
}

// executePython is the tool offered to the model.
var executePython = Tool{
	Name:        "execute_python",
	Description: "Run Python code in a persistent Jupyter kernel and return its output, results and errors.",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"code":{"type":"string"}},"required":["code"]}`),
}

func main() {
	template := flag.String("template", "code-interpreter", "code-interpreter template (E2B's cloud: code-interpreter-v1)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	answer, err := run(ctx, *template, &scriptedModel{}, "What is the sum of the squares of 1..100, and is it prime?")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("final answer:", answer)
}

// run drives the agent loop until the model answers without tool calls.
func run(ctx context.Context, template string, model Model, question string) (string, error) {
	sbx, err := sdk.Create(ctx, &sdk.CreateOptions{Template: template, Timeout: 5 * time.Minute})
	if err != nil {
		return "", fmt.Errorf("create sandbox: %w", err)
	}
	defer sbx.Kill(context.WithoutCancel(ctx))
	// One context per conversation keeps variables across tool calls.
	cc, err := sbx.CreateCodeContext(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("create code context: %w", err)
	}
	history := []Message{{Role: "user", Content: question}}
	for turn := 0; turn < 10; turn++ {
		reply, err := model.Next(ctx, history, []Tool{executePython})
		if err != nil {
			return "", fmt.Errorf("model: %w", err)
		}
		history = append(history, reply)
		if len(reply.ToolCalls) == 0 {
			return reply.Content, nil
		}
		for _, call := range reply.ToolCalls {
			result := callTool(ctx, sbx, cc, call)
			fmt.Printf("tool %s(%s)\n→ %s\n", call.Name, call.Arguments, result)
			history = append(history, Message{Role: "tool", ToolCallID: call.ID, Content: result})
		}
	}
	return "", fmt.Errorf("no answer after 10 turns")
}

// callTool runs one tool call and renders its outcome as text for the model.
// Failures are reported to the model rather than ending the loop, so it can
// correct its code.
func callTool(ctx context.Context, sbx *sdk.Sandbox, cc *sdk.CodeContext, call ToolCall) string {
	if call.Name != executePython.Name {
		return fmt.Sprintf("error: unknown tool %q", call.Name)
	}
	var args struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil || args.Code == "" {
		return "error: arguments must be {\"code\": \"...\"}"
	}
	exec, err := sbx.RunCode(ctx, args.Code, &sdk.RunCodeOptions{Context: cc, Timeout: 30 * time.Second})
	if err != nil {
		return "error: " + err.Error()
	}
	return renderExecution(exec)
}

// renderExecution formats an execution the way models read best: output,
// then the value, then the error.
func renderExecution(exec *sdk.Execution) string {
	var b strings.Builder
	if out := strings.Join(exec.Logs.Stdout, ""); out != "" {
		fmt.Fprintf(&b, "stdout:\n%s", out)
	}
	if errOut := strings.Join(exec.Logs.Stderr, ""); errOut != "" {
		fmt.Fprintf(&b, "stderr:\n%s", errOut)
	}
	for _, r := range exec.Results {
		switch {
		case r.PNG != "":
			b.WriteString("[an image was displayed]\n")
		case r.Text != "":
			fmt.Fprintf(&b, "result: %s\n", r.Text)
		}
	}
	if exec.Error != nil {
		fmt.Fprintf(&b, "error: %s: %s\n", exec.Error.Name, exec.Error.Value)
	}
	if b.Len() == 0 {
		return "(no output)"
	}
	return strings.TrimRight(b.String(), "\n")
}

// scriptedModel stands in for an LLM API: it asks for two tool calls (the
// second uses state from the first) and then answers from the tool results.
type scriptedModel struct{ step int }

func (m *scriptedModel) Next(_ context.Context, history []Message, _ []Tool) (Message, error) {
	m.step++
	switch m.step {
	case 1:
		return toolCall("call_1", "total = sum(i * i for i in range(1, 101))\ntotal"), nil
	case 2:
		return toolCall("call_2", "all(total % d for d in range(2, int(total ** 0.5) + 1))"), nil
	default:
		last := history[len(history)-1].Content
		first := history[len(history)-3].Content
		return Message{Role: "assistant", Content: fmt.Sprintf("the tools said %q and %q", first, last)}, nil
	}
}

func toolCall(id, code string) Message {
	args, _ := json.Marshal(map[string]string{"code": code})
	return Message{Role: "assistant", ToolCalls: []ToolCall{{ID: id, Name: executePython.Name, Arguments: args}}}
}
