"""A realistic Claude Code stream-json transcript for the compaction tests.

A ~40-turn coding session on a Vue + TypeScript back office ("invoice dates show
Invalid Date"): file reads with long outputs, an npm install of hundreds of lines with
spinner redraws, test runs with ANSI colours and progress redraws, a Playwright
download with a carriage-return progress bar, three trial-and-error runs that end in a
success, one failure never retried, thinking on every turn, `stream_event` partials
(as `--include-partial-messages` writes them) and a final `result`.

Every output is built from the lines a terminal would finally show plus noise that
must vanish (escapes, redraws, spinner frames), so the expected head/tail counts are
known without reimplementing the compaction.
"""
from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field

SESSION = "5b0c7f3e-2a41-4d0e-9b8e-7c1f20a9d4e6"
MODEL = "claude-sonnet-4-5-20250929"
ROOT = "/srv/worktrees/msg-4821"
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
RED, GREEN, YELLOW, DIM, BOLD, RESET = "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[2m", "\x1b[1m", "\x1b[0m"

THOUGHTS = [
    "The founder reports that invoice dates display as 'Invalid Date' on the garage-martin "
    "overlay, but only for invoices imported from the accounting export.",
    "Imported invoices probably carry dates like '2026-03-14T00:00:00+01:00' or even "
    "'14/03/2026', whereas invoices created in the back office use plain ISO dates.",
    "formatDate in src/utils/date.ts calls new Date(value) directly; Safari and some "
    "locales reject non-ISO strings, so that is the most likely culprit.",
    "Before changing anything I should reproduce it with a unit test so that the fix is "
    "pinned by a regression test, as the plan prompt requires.",
    "The type check failed because the path alias '@/utils' is not resolved by vue-tsc; "
    "tsconfig.json probably lacks baseUrl or the paths entry after the last upgrade.",
    "I must stay inside the generic back office and the client's overlay; the shared "
    "public components are out of bounds, so the fix belongs in src/utils/date.ts.",
    "The failing assertion shows the timezone offset is applied twice: parsing with the "
    "offset and then formatting in Europe/Paris shifts midnight to the previous day.",
    "Let me keep the contract file up to date after this step so a timeout still leaves "
    "a usable summary for the founder.",
    "The remaining failure is the DD/MM/YYYY branch: the regex captures the month and "
    "the day in the wrong order, which only shows for days above 12.",
    "I will check the overlay routes to report the right pages to QA: the invoice list "
    "and the invoice detail page are the two routes that render these dates.",
    "Running the whole suite now to make sure nothing else depended on the old lenient "
    "parsing, in particular the CSV export which formats the same field.",
    "ESLint complains about an unused import left over from the first attempt; removing "
    "it is trivial and keeps the diff clean.",
]

CODE = [
    "import {{ computed, ref }} from 'vue'",
    "export function formatDate(value: string | Date, locale = 'fr-FR'): string {{",
    "  const date = value instanceof Date ? value : new Date(value)",
    "  if (Number.isNaN(date.getTime())) return 'Invalid Date'",
    "  return new Intl.DateTimeFormat(locale, {{ dateStyle: 'medium' }}).format(date)",
    "}}",
    "",
    "// invoices imported from the accounting export keep their original format",
    "const invoice{n} = computed(() => store.invoices.find((i) => i.id === props.id))",
    "    <td class=\"invoice-date\">{{{{ formatDate(invoice.issuedAt) }}}}</td>",
    "  total: number",
    "  issuedAt: string",
    "export interface Invoice{n} {{",
    "  const response = await http.get<Invoice[]>(`/api/invoices?page=${{page}}`)",
    "  return response.data.map(normalizeInvoice)",
    "      <InvoiceRow v-for=\"inv in invoices\" :key=\"inv.id\" :invoice=\"inv\" />",
]

NPM_PACKAGES = ["@babel/parser", "@vue/compiler-sfc", "@vue/shared", "postcss", "nanoid",
                "source-map-js", "magic-string", "esbuild", "rollup", "vite", "vitest",
                "tinypool", "chai", "pathe", "picocolors", "typescript", "vue-tsc",
                "@volar/typescript", "@vue/language-core", "muggle-string", "minimatch",
                "brace-expansion", "balanced-match", "semver", "lru-cache", "glob", "inflight"]


@dataclass
class Transcript:
    events: list[dict]
    last_turn_start: int
    cut_results: dict[str, int] = field(default_factory=dict)   # tool_use id → lines omitted
    cut_inputs: dict[str, int] = field(default_factory=dict)    # idem, for a tool_use input
    milestones: list[set[str]] = field(default_factory=list)    # tool_use ids each one collapses
    turns: int = 0


class _Session:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.events: list[dict] = []
        self.out = Transcript(self.events, 0)
        self.run: set[str] | None = None  # ids of the trial-and-error run being recorded

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _id(self, prefix: str) -> str:
        alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789"
        return prefix + "".join(self.rng.choice(alphabet) for _ in range(24))

    def _meta(self) -> dict:
        return {"parent_tool_use_id": None, "session_id": SESSION, "uuid": self._uuid()}

    def _stream(self, event: dict) -> None:
        self.events.append({"type": "stream_event", "event": event, **self._meta()})

    def _chunks(self, text: str) -> list[str]:
        out, i = [], 0
        while i < len(text):
            n = self.rng.randint(20, 90)
            out.append(text[i:i + n])
            i += n
        return out

    def thinking(self, n: int) -> str:
        return " ".join(self.rng.choice(THOUGHTS) for _ in range(n))

    def init(self) -> None:
        tools = ["Task", "Bash", "Glob", "Grep", "LS", "ExitPlanMode", "Read", "Edit", "MultiEdit",
                 "Write", "NotebookEdit", "WebFetch", "TodoWrite", "WebSearch", "BashOutput",
                 "KillShell", "SlashCommand"]
        self.events.append({"type": "system", "subtype": "init", "cwd": ROOT, "session_id": SESSION,
                            "tools": tools, "mcp_servers": [], "model": MODEL,
                            "permissionMode": "bypassPermissions",
                            "slash_commands": ["compact", "context", "cost", "init", "review",
                                               "security-review", "pr-comments", "release-notes"],
                            "apiKeySource": "none", "claude_code_version": "2.0.14",
                            "output_style": "default", "agents": ["general-purpose"],
                            "skills": [], "plugins": [], "uuid": self._uuid()})

    def turn(self, thoughts: int, text: str | None = None, tool: tuple[str, dict] | None = None,
             output: str | list | None = None, *, error: bool = False, last: bool = False) -> str | None:
        """One assistant message (thinking, optional text, optional tool call) and its result."""
        self.out.turns += 1
        msg_id = self._id("msg_01")
        blocks: list[dict] = [{"type": "thinking", "thinking": self.thinking(thoughts),
                               "signature": self._id("Eu") * 8}]
        if text:
            blocks.append({"type": "text", "text": text})
        tool_id = None
        if tool:
            tool_id = self._id("toolu_01")
            blocks.append({"type": "tool_use", "id": tool_id, "name": tool[0], "input": tool[1]})
        self._stream({"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": MODEL, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 6, "cache_creation_input_tokens": self.rng.randint(200, 4000),
                      "cache_read_input_tokens": self.rng.randint(20000, 90000), "output_tokens": 1}}})
        for index, block in enumerate(blocks):
            kind = block["type"]
            start = {"type": kind, **({"id": tool_id, "name": tool[0], "input": {}} if kind == "tool_use"
                                      else {kind: ""})}
            self._stream({"type": "content_block_start", "index": index, "content_block": start})
            body = json.dumps(block["input"]) if kind == "tool_use" else block[kind]
            delta_kind, key = {"thinking": ("thinking_delta", "thinking"), "text": ("text_delta", "text"),
                               "tool_use": ("input_json_delta", "partial_json")}[kind]
            for piece in self._chunks(body):
                self._stream({"type": "content_block_delta", "index": index,
                              "delta": {"type": delta_kind, key: piece}})
            if kind == "thinking":
                self._stream({"type": "content_block_delta", "index": index,
                              "delta": {"type": "signature_delta", "signature": block["signature"]}})
            self._stream({"type": "content_block_stop", "index": index})
            if last and index == 0:
                self.out.last_turn_start = len(self.events)
            # Claude Code writes one assistant event per content block, same message id
            self.events.append({"type": "assistant", "message": {
                "id": msg_id, "type": "message", "role": "assistant", "model": MODEL,
                "content": [block], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": 6, "cache_creation_input_tokens": 512,
                          "cache_read_input_tokens": 48211, "output_tokens": 180,
                          "service_tier": "standard"}}, **self._meta()})
        self._stream({"type": "message_delta", "delta": {"stop_reason": "tool_use" if tool else "end_turn",
                                                         "stop_sequence": None},
                      "usage": {"output_tokens": self.rng.randint(100, 900)}})
        self._stream({"type": "message_stop"})
        if tool:
            if error:
                output = f"Exit code {self.rng.choice([1, 2])}\n{output}" if tool[0] == "Bash" else output
            self.events.append({"type": "user", "message": {"role": "user", "content": [
                {"tool_use_id": tool_id, "type": "tool_result", "content": output, "is_error": error}]},
                **self._meta()})
            if self.run is not None:
                self.run.add(tool_id)
        return tool_id

    def result(self) -> None:
        self.events.append({"type": "result", "subtype": "success", "is_error": False,
                            "duration_ms": 1_284_511, "duration_api_ms": 1_101_202,
                            "num_turns": self.out.turns, "result": "Fix committed; contract written.",
                            "session_id": SESSION, "total_cost_usd": 2.4187,
                            "usage": {"input_tokens": 412, "cache_creation_input_tokens": 61234,
                                      "cache_read_input_tokens": 2_380_114, "output_tokens": 18_422},
                            "permission_denials": [], "uuid": self._uuid()})

    # --- outputs ------------------------------------------------------------------------

    def code_lines(self, n: int) -> list[str]:
        return [f"{i:>6}→" + self.rng.choice(CODE).format(n=i) for i in range(1, n + 1)]

    def read(self, path: str, n: int, *, as_blocks: bool = False) -> tuple[tuple[str, dict], str | list]:
        body = "\n".join(self.code_lines(n)) + "\n"
        content = [{"type": "text", "text": body}] if as_blocks else body
        return ("Read", {"file_path": f"{ROOT}/{path}"}), content

    def npm_install(self, packages: int) -> tuple[str, list[str]]:
        """Raw npm output under a pty, and the lines the terminal finally shows."""
        final, raw = [], []
        for i in range(packages):
            pkg = self.rng.choice(NPM_PACKAGES)
            if i % 37 == 5:
                line = (f"npm WARN deprecated {pkg}@{self.rng.randint(1, 9)}.0.{self.rng.randint(0, 9)}: "
                        "This module is not supported, and leaks memory. Do not use it.")
            else:
                line = (f"npm http fetch GET 200 https://registry.npmjs.org/{pkg} "
                        f"{self.rng.randint(8, 400)}ms (cache {self.rng.choice(['hit', 'miss', 'revalidated'])})")
            final.append(line)
            frame = SPINNER[i % len(SPINNER)]
            # the spinner is drawn, then overwritten in place by the log line
            raw.append(f"{frame} reify:{pkg}: timing reifyNode:node_modules/{pkg} Completed in "
                       f"{self.rng.randint(1, 90)}ms\r\x1b[K{line}")
            if i % 25 == 0:
                raw.append(f"\x1b[2K\x1b[1G{frame} idealTree:{pkg}: sill placeDep ROOT {pkg}")  # a spinner-only line
        tail = ["", f"added {packages} packages, and audited {packages + 1} packages in 14s", "",
                "45 packages are looking for funding", "  run `npm fund` for details", "",
                "found 0 vulnerabilities"]
        return "\r\n".join(raw + tail) + "\r\n", final + tail

    def vitest(self, files: list[tuple[str, int, int]]) -> tuple[str, list[str]]:
        """(file, passed, failed) per file; ANSI colours and live redraws like a pty run."""
        final = ["", f" RUN  v2.1.4 {ROOT}", ""]
        raw = ["", f" {BOLD}{YELLOW}RUN{RESET}  {DIM}v2.1.4{RESET} {DIM}{ROOT}{RESET}", ""]
        failed_total = 0
        for path, passed, failed in files:
            for k in range(1, passed + failed + 1, 3):
                raw.append(f"\x1b[2K\x1b[1G ❯ {path} {k}/{passed + failed}")  # live redraw
            mark, colour = ("×", RED) if failed else ("✓", GREEN)
            ms = self.rng.randint(4, 120)
            raw[-1] += f"\r {colour}{mark}{RESET} {path} {DIM}({passed + failed} tests){RESET} {YELLOW}{ms}ms{RESET}"
            final.append(f" {mark} {path} ({passed + failed} tests) {ms}ms")
            for t in range(failed):
                failed_total += 1
                block = [f"   × formatInvoiceDate > keeps the day for offset {t + 1}",
                         f"     → expected '14 mars 2026' to be '1{3 - t} mars 2026'"]
                raw.extend(f"{RED}{b}{RESET}" for b in block)
                final.extend(block)
        if failed_total:
            detail = [f"⎯⎯⎯⎯⎯⎯⎯ Failed Tests {failed_total} ⎯⎯⎯⎯⎯⎯⎯", "",
                      " FAIL  src/utils/date.spec.ts > formatInvoiceDate > keeps the day for offset",
                      "AssertionError: expected '13 mars 2026' to be '14 mars 2026' // Object.is equality",
                      "", "- Expected", "+ Received", "", "- 14 mars 2026", "+ 13 mars 2026", "",
                      " ❯ src/utils/date.spec.ts:27:41", "     25|   it('keeps the day for offset', () => {",
                      "     26|     const d = '2026-03-14T00:00:00+01:00'",
                      "     27|     expect(formatInvoiceDate(d)).toBe('14 mars 2026')",
                      "       |                                         ^", "     28|   })", ""]
            raw.extend(f"{RED}{d}{RESET}" if d.startswith(("AssertionError", " FAIL")) else d for d in detail)
            final.extend(detail)
        n_failed = sum(f for _, _, f in files)
        n_passed = sum(p for _, p, _ in files)
        files_failed = sum(1 for *_, f in files if f)
        summary = [f" Test Files  {files_failed} failed | {len(files) - files_failed} passed ({len(files)})"
                   if files_failed else f" Test Files  {len(files)} passed ({len(files)})",
                   f"      Tests  {n_failed} failed | {n_passed} passed ({n_failed + n_passed})"
                   if n_failed else f"      Tests  {n_passed} passed ({n_passed})",
                   "   Start at  10:42:17", "   Duration  2.31s (transform 412ms, setup 0ms, "
                   "collect 1.02s, tests 389ms, environment 1.12s, prepare 512ms)"]
        raw.extend(["", *summary])
        final.extend(["", *summary])
        return "\n".join(raw) + "\n", final

    def playwright_download(self) -> str:
        head = ("Downloading Chromium 131.0.6778.33 (playwright build v1148) from "
                "https://cdn.playwright.dev/dbazure/download/playwright/builds/chromium/1148/chromium-linux.zip")
        bar = "".join(f"\r|{'■' * (p * 8 // 10):<80}| {p:>3}% of 167.7 MiB" for p in range(0, 101, 2))
        done = "Chromium 131.0.6778.33 (playwright build v1148) downloaded to /root/.cache/ms-playwright/chromium-1148"
        return f"{head}\r\n{bar}\r\n{done}\r\n"


def coding_session(seed: int = 4821) -> Transcript:
    s = _Session(seed)
    out = s.out
    s.init()
    bash = lambda command, description="": ("Bash", {"command": command, "description": description})  # noqa: E731

    s.turn(3, "I'll start by looking at the repository state and the date helpers.",
           bash("git status && git log --oneline -12", "Show status and recent history"),
           "On branch synedre/msg-4821\nnothing to commit, working tree clean\n"
           + "\n".join(f"{s._id('')[:7]} fix(overlay): adjust label {i}" for i in range(12)))
    grep = "\n".join(f"src/{p}:{s.rng.randint(3, 240)}:    formatDate(invoice.issuedAt)"
                     for p in ["pages/InvoicePage.vue", "components/InvoiceRow.vue", "utils/csv.ts",
                               "pages/QuotePage.vue", "utils/date.ts"] * 6)
    gid = s.turn(2, None, ("Grep", {"pattern": "formatDate\\(", "path": ROOT, "output_mode": "content",
                                    "-n": True}), grep)
    out.cut_results[gid] = 30 - 15
    for path, n, blocks in [("src/utils/date.ts", 120, False), ("src/pages/InvoicePage.vue", 240, True),
                            ("src/api/invoices.ts", 90, False)]:
        tool, content = s.read(path, n, as_blocks=blocks)
        out.cut_results[s.turn(2, None, tool, content)] = n - 15
    s.turn(2, "The imported invoices carry an offset; let me look for the import docs.",
           bash(f"ls {ROOT}/docs/imports"), f"ls: cannot access '{ROOT}/docs/imports': No such file or directory",
           error=True)   # never retried: must survive as it is
    raw, final = s.npm_install(140)
    out.cut_results[s.turn(2, "Installing dependencies first.", bash("npm ci", "Install dependencies"), raw)] = \
        len(final) - 15

    # Milestone 1: the type check needs typescript/vue-tsc and a path alias
    s.run = set()
    tsc_error = ("src/pages/InvoicePage.vue:42:17 - error TS2307: Cannot find module '@/utils/date' or its "
                 "corresponding type declarations.\n\n42 import { formatDate } from '@/utils/date'\n"
                 "                   ~~~~~~~~~~~~~~~\n\nFound 1 error in src/pages/InvoicePage.vue:42\n")
    s.turn(3, "Let me run the type check before touching anything.",
           bash("npx vue-tsc --noEmit", "Type-check the project"), tsc_error, error=True)
    tool, content = s.read("package.json", 64)
    s.turn(2, None, tool, content)
    raw, _ = s.npm_install(300)
    s.turn(3, "vue-tsc is missing from devDependencies; adding pinned versions.",
           bash("npm install -D typescript@5.8.3 vue-tsc@2.2.12", "Add the type checker"), raw)
    s.turn(2, None, bash("npx vue-tsc --noEmit"),
           tsc_error.replace("TS2307", "TS2345").replace("Cannot find module", "Argument of type string "
                                                                                "is not assignable, module"),
           error=True)
    s.turn(2, "The alias is missing from tsconfig.json.",
           ("Edit", {"file_path": f"{ROOT}/tsconfig.json", "old_string": '    "strict": true,',
                     "new_string": '    "strict": true,\n    "baseUrl": ".",\n    "paths": { "@/*": ["src/*"] },'}),
           f"The file {ROOT}/tsconfig.json has been updated. Here's the result of running `cat -n` on a "
           "snippet of the edited file:\n" + "\n".join(s.code_lines(12)))
    s.turn(1, None, bash("npx vue-tsc --noEmit"), "")
    out.milestones.append(s.run)
    s.run = None

    s.turn(3, "Now the fix itself: parse the offset explicitly.",
           ("Edit", {"file_path": f"{ROOT}/src/utils/date.ts", "old_string": "  const date = value instanceof "
                     "Date ? value : new Date(value)", "new_string": "  const date = parseInvoiceDate(value)"}),
           f"The file {ROOT}/src/utils/date.ts has been updated. Here's the result of running `cat -n` on a "
           "snippet of the edited file:\n" + "\n".join(s.code_lines(14)))
    spec = "\n".join(f"  it('case {i}', () => expect(formatInvoiceDate(cases[{i}].input)).toBe(cases[{i}].want))"
                     for i in range(80))
    wid = s.turn(3, "And the regression test, written before going further.",
                 ("Write", {"file_path": f"{ROOT}/src/utils/date.spec.ts", "content": spec}),
                 f"File created successfully at: {ROOT}/src/utils/date.spec.ts")
    out.cut_inputs[wid] = 80 - 15

    # Milestone 2: the regression test until it passes
    s.run = set()
    raw, _ = s.vitest([("src/utils/date.spec.ts", 78, 2)])
    s.turn(2, None, bash("npx vitest run src/utils/date.spec.ts", "Run the new test"), raw, error=True)
    tool, content = s.read("src/utils/date.ts", 130)
    s.turn(3, None, tool, content)
    edit = ("Edit", {"file_path": f"{ROOT}/src/utils/date.ts", "old_string": "return new Date(iso)",
                     "new_string": "return new Date(Date.UTC(y, m - 1, d))"})
    s.turn(2, "The offset is applied twice.", edit, f"The file {ROOT}/src/utils/date.ts has been updated.")
    raw, _ = s.vitest([("src/utils/date.spec.ts", 79, 1)])
    s.turn(2, None, bash("npx vitest run src/utils/date.spec.ts"), raw, error=True)
    s.turn(3, "Day and month are swapped in the DD/MM/YYYY branch.", edit,
           f"The file {ROOT}/src/utils/date.ts has been updated.")
    raw, _ = s.vitest([("src/utils/date.spec.ts", 80, 0)])
    s.turn(1, None, bash("npx vitest run src/utils/date.spec.ts"), raw)
    out.milestones.append(s.run)
    s.run = None

    raw, _ = s.vitest([(f"src/{p}.spec.ts", s.rng.randint(3, 30), 0) for p in
                       ["utils/date", "utils/csv", "utils/money", "api/invoices", "api/quotes", "pages/InvoicePage",
                        "pages/QuotePage", "components/InvoiceRow", "components/Pager", "store/invoices",
                        "store/session", "router/guards", "overlays/garage-martin/routes", "i18n/fr", "i18n/en"]])
    s.turn(3, "Whole suite, to be sure nothing relied on the lenient parsing.",
           bash("npm test -- --run", "Run the whole suite"), raw)
    for old, new in [("formatDate(invoice.issuedAt)", "formatInvoiceDate(invoice.issuedAt)"),
                     ("import { formatDate } from '@/utils/date'", "import { formatInvoiceDate } from '@/utils/date'")]:
        s.turn(2, None, ("Edit", {"file_path": f"{ROOT}/src/pages/InvoicePage.vue", "old_string": old,
                                  "new_string": new}),
               f"The file {ROOT}/src/pages/InvoicePage.vue has been updated. Here's the result of running "
               "`cat -n` on a snippet of the edited file:\n" + "\n".join(s.code_lines(10)))

    # Milestone 3: lint
    s.run = set()
    s.turn(2, None, bash("npx eslint src/pages/InvoicePage.vue src/utils/date.ts", "Lint the touched files"),
           f"\n{ROOT}/src/utils/date.ts\n  3:10  {RED}error{RESET}  'parseISO' is defined but never used  "
           f"@typescript-eslint/no-unused-vars\n\n{RED}{BOLD}✖ 1 problem (1 error, 0 warnings){RESET}\n",
           error=True)
    s.turn(1, None, ("Edit", {"file_path": f"{ROOT}/src/utils/date.ts",
                              "old_string": "import { parseISO } from 'date-fns'\n", "new_string": ""}),
           f"The file {ROOT}/src/utils/date.ts has been updated.")
    s.turn(1, None, bash("npx eslint src/pages/InvoicePage.vue src/utils/date.ts"), "")
    out.milestones.append(s.run)
    s.run = None

    s.turn(2, "QA will need a browser; making sure Chromium is there.",
           bash("npx playwright install chromium", "Install the QA browser"), s.playwright_download())
    # vite redraws its "transforming" line in place, then prints the summary
    redraws = "".join(f"\x1b[2K\x1b[1Gtransforming ({i}) src/{s.rng.choice(['pages', 'utils'])}/x{i}.ts"
                      for i in range(1, 200, 7))
    build = (["vite v5.4.10 building for production...", redraws + "\x1b[2K\x1b[1G✓ 812 modules transformed.",
              "rendering chunks (14)...", "computing gzip size (9)..."]
             + [f"dist/assets/{name}-{s._id('')[:8]}.js   {s.rng.randint(10, 900)}.{s.rng.randint(10, 99)} kB │ gzip: "
                f"{s.rng.randint(3, 200)}.{s.rng.randint(10, 99)} kB" for name in
                ["index", "InvoicePage", "QuotePage", "vendor", "charts", "pdf", "i18n"] * 3]
             + ["✓ built in 9.84s"])
    s.turn(2, None, bash("npm run build", "Production build"), "\r\n".join(build) + "\r\n")
    tool, content = s.read("overlays/garage-martin/routes.ts", 48)
    out.cut_results[s.turn(3, "Which overlay routes show invoice dates?", tool, content)] = 48 - 15
    s.turn(2, None, ("Grep", {"pattern": "InvoicePage", "path": f"{ROOT}/overlays/garage-martin"}),
           "overlays/garage-martin/routes.ts:12\noverlays/garage-martin/routes.ts:19\n")
    s.turn(2, None, bash("git diff --stat"),
           " src/pages/InvoicePage.vue   |  4 +-\n src/utils/date.spec.ts      | 82 ++++++++\n"
           " src/utils/date.ts           | 22 +++--\n tsconfig.json               |  2 +\n"
           " 4 files changed, 96 insertions(+), 14 deletions(-)\n")
    s.turn(2, "Committing.", bash("git add -A && git commit -m 'fix(factures): parse imported invoice dates'"),
           "[synedre/msg-4821 3f2a1b9] fix(factures): parse imported invoice dates\n 4 files changed, "
           "96 insertions(+), 14 deletions(-)\n create mode 100644 src/utils/date.spec.ts\n")
    contract = {"ok": True, "tenant": "garage-martin", "routes_to_qa": ["/factures", "/factures/1042"],
                "commits": ["3f2a1b9"], "summary_md": "Dates des factures importées corrigées.",
                "draft_reply_for_user": "Bonjour, le problème d'affichage des dates est corrigé."}
    s.turn(2, "Writing the contract.", ("Write", {"file_path": "/tmp/synedre-contract-4821.json",
                                                  "content": json.dumps(contract, indent=2, ensure_ascii=False)}),
           "File created successfully at: /tmp/synedre-contract-4821.json")
    s.turn(1, None, bash("python3 -m json.tool /tmp/synedre-contract-4821.json"),
           json.dumps(contract, indent=4, ensure_ascii=False) + "\n")
    s.turn(2, None, bash("git log --oneline -3"),
           "3f2a1b9 fix(factures): parse imported invoice dates\n9c1d2e0 fix(overlay): adjust label 0\n"
           "1a2b3c4 fix(overlay): adjust label 1\n")
    for _ in range(4):   # a few short investigative turns, as real sessions have
        s.turn(1, None, bash("git status --short"), "")
    s.turn(2, "Everything is committed; a last look at the date helper.",
           ("Read", {"file_path": f"{ROOT}/src/utils/date.ts", "offset": 1, "limit": 15}),
           "\n".join(s.code_lines(15)))
    s.turn(4, "Done. Imported invoice dates now render correctly on /factures and /factures/1042; "
              "a regression test pins the three date formats (commit 3f2a1b9). The contract is written.",
           last=True)
    s.result()
    return out
