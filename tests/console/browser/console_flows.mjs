// Drives the weir console in headless Chromium (Debian's /usr/bin/chromium) with puppeteer-core:
// opens /console against a `weir serve --console --workflows ...`, starts human_review from the
// page, sees the graph and the interrupt, answers it in the form, sees the run finish, forks from
// a checkpoint, opens the fences, and screenshots each view into OUTDIR. Prints one JSON object
// of what the page showed (tests/console/console_test.cpp checks it); any console error, page
// error or failed request in the page is listed in "problems".
//
//   node console_flows.mjs http://127.0.0.1:PORT OUTDIR [CHROMIUM]
import fs from 'node:fs';
import path from 'node:path';
import { launch, pickAssistant, watchedPage } from './page.mjs';

const [base, outDir, chrome = process.env.WEIR_CHROMIUM || '/usr/bin/chromium'] = process.argv.slice(2);
if (!base || !outDir) {
  console.error('usage: node console_flows.mjs http://127.0.0.1:PORT OUTDIR [CHROMIUM]');
  process.exit(2);
}
fs.mkdirSync(outDir, { recursive: true });

const seen = { problems: [], shots: [] };
const browser = await launch(chrome);
const step = async (name, fn) => {
  try { await fn(); } catch (e) { seen.problems.push(`${name}: ${e.message.split('\n')[0]}`); throw e; }
};

try {
  const page = await watchedPage(browser, seen.problems);
  const shot = async (name) => {
    const file = path.join(outDir, `${name}.png`);
    await page.screenshot({ path: file, fullPage: true });
    seen.shots.push(file);
  };
  const textOf = (sel) => page.$eval(sel, e => e.textContent.trim());

  // 1. The threads list, empty, with the start form.
  await step('open', async () => {
    await page.goto(`${base}/console`, { waitUntil: 'networkidle2' });
    await page.waitForSelector('#start-graph');
    seen.title = await page.title();
    seen.assistants = await page.$$eval('#start-graph option', os => os.map(o => o.value));
    await page.waitForFunction(() => document.querySelector('#thread-count')?.textContent.includes('thread'));
    seen.empty_count = await textOf('#thread-count');
  });

  // 2. Start human_review from the form; the page moves to the thread and shows the interrupt.
  await step('start', async () => {
    await pickAssistant(page, 'human_review');
    await page.waitForFunction(() => document.querySelector('#start-input').value.includes('topic'));
    await page.$eval('#start-input', e => { e.value = ''; });
    await page.type('#start-input', '{"topic": "bounded queues"}');
    await page.click('#start-run');
    await page.waitForSelector('#interrupt:not([hidden]) #interrupt-payload');
    seen.thread_url = page.url();
    seen.interrupt_title = await textOf('#interrupt h2');
    seen.interrupt_payload = JSON.parse(await textOf('#interrupt-payload'));
    seen.status_interrupted = await textOf('#thread-status');
    seen.graph_nodes = await page.$$eval('#graph g.node', gs => gs.map(g => g.dataset.node));
    seen.waiting_nodes = await page.$$eval('#graph g.node.waiting', gs => gs.map(g => g.dataset.node));
    seen.live = await textOf('#live');
    await shot('run-interrupted');
  });

  // 3. The form checks the JSON before sending: text without quotes is refused.
  await step('resume', async () => {
    await page.type('#resume-value', 'approve');
    seen.bad_json_error = await textOf('#resume-error');
    seen.bad_json_disabled = await page.$eval('#resume-send', b => b.disabled);
    await page.$eval('#resume-value', e => { e.value = ''; });
    await page.type('#resume-value', '"approve"');
    seen.good_json_disabled = await page.$eval('#resume-send', b => b.disabled);
    await page.click('#resume-send');
    await page.waitForFunction(() => document.querySelector('#thread-status')?.textContent === 'idle'
      && document.querySelector('#interrupt').hidden
      && [...document.querySelectorAll('#timeline .step-node')].some(e => e.textContent === 'publish'));
    seen.status_finished = await textOf('#thread-status');
    seen.steps = await page.$$eval('#timeline .step-node', es => es.map(e => e.textContent));
    seen.visited = await page.$$eval('#graph g.node.visited', gs => gs.map(g => g.dataset.node));
    seen.runs_after_resume = await page.$$eval('#runs tbody tr', rs => rs.map(r => r.querySelector('.badge').textContent));
    // The last step is selected: its diff shows what publish changed.
    seen.last_diff = await page.$$eval('#step dl.diff dt', ds => ds.map(d => d.textContent.replace(/\s+/g, ' ').trim()));
    await shot('run-finished');
  });

  // 4. A step's state diff, picked from the timeline with the keyboard.
  await step('diff', async () => {
    const picks = await page.$$('#timeline .step-pick');
    await picks[1].focus();
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelector('#step h2')?.textContent.startsWith('Step 1'));
    seen.step1_diff = await page.$$eval('#step dl.diff dt', ds => ds.map(d => d.textContent.replace(/\s+/g, ' ').trim()));
  });

  // 5. Fork from the checkpoint before the review: a new run that pauses at the review again.
  await step('fork', async () => {
    const before = (await page.$$('#runs tbody tr')).length;
    await page.click('#timeline li[data-step="1"] button.fork');
    await page.waitForSelector('#interrupt:not([hidden]) #interrupt-payload');
    await page.waitForFunction(n => document.querySelectorAll('#runs tbody tr').length === n + 1, {}, before);
    seen.runs_after_fork = await page.$$eval('#runs tbody tr', rs => rs.length);
    seen.status_forked = await textOf('#thread-status');
    seen.forked_payload = JSON.parse(await textOf('#interrupt-payload'));
    await shot('fork');
  });

  // 5b. A client renamed the thread's graph to one this server does not run: the view still
  // shows the thread (its graph is the one its runs used), with every step.
  await step('renamed', async () => {
    const steps = (await page.$$('#timeline .step-node')).length;
    const thread = decodeURIComponent(page.url().split('#/thread/')[1].split('?')[0]);
    const r = await fetch(`${base}/threads/${encodeURIComponent(thread)}`, {
      method: 'PATCH', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ metadata: { graph_id: 'nosuch' } }),
    });
    seen.renamed_status = r.status;
    await page.reload({ waitUntil: 'networkidle2' });
    await page.waitForSelector('#interrupt:not([hidden]) #interrupt-payload');
    await page.waitForFunction(n => document.querySelectorAll('#timeline .step-node').length === n, {}, steps);
    seen.renamed_steps = (await page.$$('#timeline .step-node')).length === steps;
    seen.renamed_graph_nodes = await page.$$eval('#graph [data-node]', es => es.length);
  });

  // 6. The list, filtered: the thread is interrupted again.
  await step('list', async () => {
    await page.goto(`${base}/console#/?status=interrupted`, { waitUntil: 'networkidle2' });
    await page.waitForSelector('#threads tbody tr[data-thread]');
    seen.interrupted_rows = await page.$$eval('#threads tbody tr[data-thread]', rs => rs.map(r => r.children[2].textContent));
    seen.list_count = await textOf('#thread-count');
    await shot('threads');
    await page.select('#filter-status', 'idle');
    await page.waitForFunction(() => document.querySelector('#thread-count')?.textContent.startsWith('0 '));
    seen.idle_count = await textOf('#thread-count');
  });

  // 6b. The fences that acted on a run, on its steps: big_payload's 5 MB document moved to the
  // artifact store, shown on the step that wrote it, and said in words when it is picked.
  await step('run fences', async () => {
    await page.goto(`${base}/console`, { waitUntil: 'networkidle2' });
    await page.waitForSelector('#start-graph');
    await pickAssistant(page, 'big_payload');
    await page.click('#start-run');
    await page.waitForFunction(() => document.querySelector('#thread-status')?.textContent === 'idle'
      && document.querySelector('#timeline .badge.fence'));
    seen.fence_badges = await page.$$eval('#timeline .badge.fence', bs => bs.map(b => b.textContent));
    await page.click('#timeline .badge.fence');
    await page.waitForSelector('#step .fences li');
    seen.fence_text = await page.$$eval('#step .fences li', ls => ls.map(l => l.textContent));
    await shot('run-fences');
    // The document's download: the bytes from the thread's artifacts route, saved as a file.
    const saveTo = path.join(outDir, 'downloads');
    fs.mkdirSync(saveTo, { recursive: true });
    const cdp = await page.target().createCDPSession();
    await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: saveTo });
    const got = page.waitForResponse(r => r.url().includes('/artifacts/'));
    await page.click('#step button.download');
    const r = await got;
    seen.download_status = r.status();
    seen.download_type = r.headers()['content-type'];
    await page.waitForFunction(() => document.querySelector('#step button.download')?.textContent.startsWith('Downloaded'));
    seen.download_label = await textOf('#step button.download');
    for (let i = 0; i < 50 && !fs.readdirSync(saveTo).some(f => !f.endsWith('.crdownload')); i++)
      await new Promise(res => setTimeout(res, 100));
    seen.downloaded = fs.readdirSync(saveTo).map(f => ({ name: f, bytes: fs.statSync(path.join(saveTo, f)).size }));
  });

  // 7. The fences: the memory budget against its limits, the runs, the refusals.
  await step('fences', async () => {
    await page.click('#nav-fences');
    await page.waitForSelector('#chart-memory svg');
    await page.waitForSelector('#chart-runs svg');
    seen.memory_label = await page.$eval('#chart-memory svg', s => s.getAttribute('aria-label'));
    seen.runs_label = await page.$eval('#chart-runs svg', s => s.getAttribute('aria-label'));
    seen.kv_text = await textOf('#chart-kv');
    await new Promise(r => setTimeout(r, 2500));  // a second sample for the lines
    await shot('fences');
  });
} catch (e) {
  seen.failed = e.message.split('\n')[0];
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));
