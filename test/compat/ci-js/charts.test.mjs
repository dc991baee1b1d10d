// Figures, chart JSON and DataFrames with the official @e2b/code-interpreter
// SDK (docs/wire/code-interpreter.md §4.2–§4.4). Expected values are worked out from
// the plotted data by hand, not taken from the server.

import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { CONCURRENCY, assertFields, assertKeys, chartKeys, createSandbox, figureResult, runOk } from './helpers.mjs'

const PNG_MAGIC = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]

function assertPng(b64, what) {
  assert.equal(typeof b64, 'string', `${what}: png is not a base64 string`)
  const bytes = Buffer.from(b64, 'base64')
  assert.deepEqual([...bytes.subarray(0, 8)], PNG_MAGIC, `${what}: not a PNG`)
}

function assertChart(chart, expected) {
  assertKeys(chart, chartKeys(expected.type), `${expected.type} chart`)
  assertFields(chart, expected)
}

describe('charts', { concurrency: CONCURRENCY }, () => {
  test('plt.show() gives one display result with png, the figure text and a chart, extra == {}', async (t) => {
    const sbx = await createSandbox(t)
    const ex = await runOk(sbx, 'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()')
    assert.equal(ex.results.length, 1)
    const r = ex.results[0]
    assert.equal(r.isMainResult, false)
    assertPng(r.png, 'plt.show()')
    assert.equal(r.text, '<Figure size 640x480 with 1 Axes>')
    assert.equal(r.chart.type, 'line')
    assert.deepEqual(r.extra, {}, 'no unknown top-level keys')
    assert.deepEqual(r.formats(), ['png'])

    const two = await runOk(sbx, 'plt.plot([1, 2], [2, 1])\nplt.show()\n1 + 1')
    assert.equal(two.results.length, 2, 'plt.show() followed by an expression gives 2 results')
    assertPng(two.results[0].png, 'first')
    assert.equal(two.results[0].isMainResult, false)
    assert.equal(two.results[1].isMainResult, true)
    assert.equal(two.text, '2')
  })

  test('line chart: labels, units, ticks, scales and points', async (t) => {
    const sbx = await createSandbox(t)
    const r = await figureResult(
      sbx,
      `import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([0, 1, 2, 3], [0, 1, 4, 9], label="squares")
ax.plot([0, 1, 2, 3], [3, 2, 1, 0])
ax.set_title("Growth")
ax.set_xlabel("Time (s)")
ax.set_ylabel("Distance [m]")
ax.set_xticks([0, 1, 2, 3])
ax.set_yticks([0, 5, 10])
plt.show()`
    )
    assertChart(r.chart, {
      type: 'line',
      title: 'Growth',
      x_label: 'Time (s)',
      y_label: 'Distance [m]',
      x_unit: 's',
      y_unit: 'm',
      x_scale: 'linear',
      y_scale: 'linear',
      x_ticks: [0, 1, 2, 3],
      x_tick_labels: ['0', '1', '2', '3'],
      y_ticks: [0, 5, 10],
      y_tick_labels: ['0', '5', '10'],
      elements: [
        { label: 'squares', points: [[0, 0], [1, 1], [2, 4], [3, 9]] },
        { label: 'Line 1', points: [[0, 3], [1, 2], [2, 1], [3, 0]] },
      ],
    })

    const dates = await figureResult(
      sbx,
      `import datetime
fig, ax = plt.subplots()
ax.plot([datetime.datetime(2024, 1, d) for d in (1, 2, 3)], [1, 10, 100], label="d")
ax.set_yscale("log")
ax.set_ylabel("Y-axis (log scale)")
plt.show()`
    )
    const c = dates.chart
    assertChart(c, { type: 'line', title: null, x_label: null, x_unit: null, y_unit: 'log scale', x_scale: 'datetime', y_scale: 'log' })
    assert.ok(c.x_ticks.length > 0)
    for (const tick of c.x_ticks) {
      assert.equal(typeof tick, 'string', 'date ticks are ISO strings')
      assert.ok(!Number.isNaN(Date.parse(tick)), `${tick} is not an ISO date`)
    }
    assert.equal(c.elements.length, 1)
    assert.equal(c.elements[0].label, 'd')
    assert.deepEqual(
      c.elements[0].points.map(([x]) => x.slice(0, 10)),
      ['2024-01-01', '2024-01-02', '2024-01-03'],
      'date x values are ISO strings'
    )
    assert.deepEqual(c.elements[0].points.map(([, y]) => y), [1, 10, 100])

    const cats = await figureResult(sbx, 'fig, ax = plt.subplots()\nax.plot(["a", "b", "c"], [1, 3, 2])\nplt.show()')
    assertChart(cats.chart, { type: 'line', x_scale: 'categorical', x_ticks: [0, 1, 2], x_tick_labels: ['a', 'b', 'c'] })
  })

  test('scatter chart: one element per collection with its offsets', async (t) => {
    const sbx = await createSandbox(t)
    const r = await figureResult(
      sbx,
      `import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.scatter([1, 2, 3], [4, 5, 6], label="A")
ax.scatter([1.5, 2.5], [0.5, 1.5], label="B")
ax.set_title("Scatter")
ax.set_xlabel("x")
ax.set_ylabel("Speed (m/s)")
ax.set_xticks([1, 2, 3])
ax.set_yticks([0, 2, 4, 6])
plt.show()`
    )
    assertChart(r.chart, {
      type: 'scatter',
      title: 'Scatter',
      x_label: 'x',
      y_label: 'Speed (m/s)',
      x_unit: null,
      y_unit: 'm/s',
      x_scale: 'linear',
      y_scale: 'linear',
      x_ticks: [1, 2, 3],
      x_tick_labels: ['1', '2', '3'],
      y_ticks: [0, 2, 4, 6],
      y_tick_labels: ['0', '2', '4', '6'],
      elements: [
        { label: 'A', points: [[1, 4], [2, 5], [3, 6]] },
        { label: 'B', points: [[1.5, 0.5], [2.5, 1.5]] },
      ],
    })
  })

  test('bar chart: vertical, grouped and horizontal (axes swapped); mixed axes are unknown', async (t) => {
    const sbx = await createSandbox(t)
    const v = await figureResult(
      sbx,
      `import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.bar(["Author A", "Author B", "Author C"], [100, 200, 300], label="Books Sold")
ax.set_title("Book Sales by Authors")
ax.set_xlabel("Authors")
ax.set_ylabel("Number of Books Sold")
plt.show()`
    )
    assertChart(v.chart, {
      type: 'bar',
      title: 'Book Sales by Authors',
      x_label: 'Authors',
      y_label: 'Number of Books Sold',
      x_unit: null,
      y_unit: null,
      elements: [
        { label: 'Author A', group: 'Books Sold', value: 100 },
        { label: 'Author B', group: 'Books Sold', value: 200 },
        { label: 'Author C', group: 'Books Sold', value: 300 },
      ],
    })

    const grouped = await figureResult(
      sbx,
      `fig, ax = plt.subplots()
ax.bar([-0.2, 0.8], [10, 20], width=0.4, label="Y2023")
ax.bar([0.2, 1.2], [15, 5], width=0.4)
ax.set_xticks([0, 1], ["Q1", "Q2"])
plt.show()`
    )
    assertChart(grouped.chart, {
      type: 'bar',
      title: null,
      x_label: null,
      y_label: null,
      elements: [
        { label: 'Q1', group: 'Y2023', value: 10 },
        { label: 'Q2', group: 'Y2023', value: 20 },
        { label: 'Q1', group: 'Group 1', value: 15 },
        { label: 'Q2', group: 'Group 1', value: 5 },
      ],
    })

    const h = await figureResult(
      sbx,
      `fig, ax = plt.subplots()
ax.barh(["x", "y", "z"], [3, 1, 2], label="L")
ax.set_xlabel("Count (n)")
ax.set_ylabel("Letter")
plt.show()`
    )
    assertChart(h.chart, {
      type: 'bar',
      x_label: 'Letter',
      y_label: 'Count (n)',
      x_unit: null,
      y_unit: 'n',
      elements: [
        { label: 'x', group: 'L', value: 3 },
        { label: 'y', group: 'L', value: 1 },
        { label: 'z', group: 'L', value: 2 },
      ],
    })

    const mixed = await figureResult(
      sbx,
      'fig, ax = plt.subplots()\nax.plot([0, 1], [1, 2])\nax.bar(["a", "b"], [1, 2])\nax.set_title("Mixed")\nplt.show()'
    )
    assert.deepEqual(mixed.chart, { type: 'unknown', title: 'Mixed', elements: [] })
  })

  test('pie chart: angle per wedge and radius', async (t) => {
    const sbx = await createSandbox(t)
    const r = await figureResult(
      sbx,
      `import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.pie([90, 10], labels=["Big", "Small"])
ax.set_title("Share")
plt.show()`
    )
    assertChart(r.chart, {
      type: 'pie',
      title: 'Share',
      elements: [
        { label: 'Big', angle: 324, radius: 1 },
        { label: 'Small', angle: 36, radius: 1 },
      ],
    })
  })

  test('box-and-whisker chart: quartiles, whiskers and outliers', async (t) => {
    const sbx = await createSandbox(t)
    const r = await figureResult(
      sbx,
      `import matplotlib.pyplot as plt
data = {
    "Class A": [85, 90, 78, 92, 88],
    "Class B": [95, 89, 76, 91, 84, 87],
    "Class C": [75, 82, 88, 79, 86],
}
fig, ax = plt.subplots()
ax.boxplot(list(data.values()), labels=list(data.keys()), patch_artist=True)
ax.set_title("Exam Scores Distribution")
ax.set_xlabel("Class")
ax.set_ylabel("Score (points)")
plt.show()`
    )
    // Linear-interpolated quartiles, whiskers at the last datum within 1.5 IQR
    // (Class B: Q1 84.75, IQR 5.75, lower fence 76.125, so 76 is an outlier).
    assertChart(r.chart, {
      type: 'box_and_whisker',
      title: 'Exam Scores Distribution',
      x_label: 'Class',
      y_label: 'Score (points)',
      x_unit: null,
      y_unit: 'points',
      elements: [
        { label: 'Class A', min: 78, first_quartile: 85, median: 88, third_quartile: 90, max: 92, outliers: [] },
        { label: 'Class B', min: 84, first_quartile: 84.75, median: 88, third_quartile: 90.5, max: 95, outliers: [76] },
        { label: 'Class C', min: 75, first_quartile: 79, median: 82, third_quartile: 86, max: 88, outliers: [] },
      ],
    })
  })

  test('a figure with several Axes is a superchart of their charts', async (t) => {
    const sbx = await createSandbox(t)
    const r = await figureResult(
      sbx,
      `import matplotlib.pyplot as plt
fig, (left, right) = plt.subplots(1, 2)
left.plot([1, 2], [3, 4], label="l")
left.set_title("Left")
right.bar(["p", "q"], [1, 2], label="b")
right.set_title("Right")
fig.suptitle("Both")
plt.show()`
    )
    assert.equal(r.text, '<Figure size 640x480 with 2 Axes>')
    assertChart(r.chart, {
      type: 'superchart',
      title: 'Both',
      elements: [
        { type: 'line', title: 'Left', elements: [{ label: 'l', points: [[1, 3], [2, 4]] }] },
        {
          type: 'bar',
          title: 'Right',
          elements: [
            { label: 'p', group: 'b', value: 1 },
            { label: 'q', group: 'b', value: 2 },
          ],
        },
      ],
    })
    assertKeys(r.chart.elements[0], chartKeys('line'), 'superchart line element')
    assertKeys(r.chart.elements[1], chartKeys('bar'), 'superchart bar element')
  })

  test('DataFrames carry data as column lists, as main result and through display()', async (t) => {
    const sbx = await createSandbox(t)
    const setup = `import pandas as pd
df = pd.DataFrame({
    "a": [1, 2, 3],
    "b": ["x", "y", "z"],
    "f": [0.5, 1.5, 2.5],
    "t": pd.to_datetime(["2024-01-01", "2024-01-02 03:04:05", "2024-01-03"]),
})`
    const main = await runOk(sbx, `${setup}\ndf`)
    assert.equal(main.results.length, 1)
    const r = main.results[0]
    assert.equal(r.isMainResult, true)
    assertFields(r.data, {
      a: [1, 2, 3],
      b: ['x', 'y', 'z'],
      f: [0.5, 1.5, 2.5],
      t: ['2024-01-01T00:00:00', '2024-01-02T03:04:05', '2024-01-03T00:00:00'],
    }, 'data')
    assert.deepEqual(Object.keys(r.data), ['a', 'b', 'f', 't'])
    assert.match(r.html, /<table/)
    assert.match(r.text, /a\s+b\s+f\s+t/)
    assert.deepEqual(r.formats(), ['html', 'data'])

    const shown = await runOk(sbx, 'display(df[["a"]])')
    assert.equal(shown.results.length, 1)
    assert.equal(shown.results[0].isMainResult, false)
    assert.deepEqual(shown.results[0].data, { a: [1, 2, 3] })
  })

  test('PIL images: show() and save() display a png', async (t) => {
    const sbx = await createSandbox(t)
    const shown = await runOk(sbx, 'from PIL import Image\nimg = Image.new("RGB", (8, 8), "red")\nimg.show()')
    const pngs = shown.results.filter((r) => r.png)
    assert.equal(pngs.length, 1, `Image.show() results: ${JSON.stringify(shown.results.map((r) => r.formats()))}`)
    assertPng(pngs[0].png, 'Image.show()')

    const saved = await runOk(sbx, 'import os\nimg.save("/tmp/red.png")\nos.path.getsize("/tmp/red.png") > 0')
    const savedPngs = saved.results.filter((r) => r.png)
    assert.equal(savedPngs.length, 1, 'Image.save() displays the image')
    assertPng(savedPngs[0].png, 'Image.save()')
    assert.equal(saved.text, 'True', 'the file is still written')
  })
})
