// What the console's browser flows share: Chromium launched headless, and a page on a laptop
// screen whose console errors, page errors, failed requests and HTTP errors are listed in
// `problems`.
import puppeteer from 'puppeteer-core';

export async function launch(chrome) {
  return puppeteer.launch({
    executablePath: chrome,
    headless: true,
    // --no-sandbox: tests run as root in containers, where Chromium's sandbox cannot start.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  });
}

export async function watchedPage(browser, problems) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1366, height: 900 });  // a laptop screen
  // A minute: CI runs these beside the rest of the suite (and under the sanitizers), where a step
  // that takes a second here can take twenty.
  page.setDefaultTimeout(60000);
  page.on('console', m => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
  page.on('pageerror', e => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', r => {
    const why = r.failure()?.errorText || '';
    // The page ends a run's event stream itself when the user leaves the view: not a failure.
    if (why === 'net::ERR_ABORTED' && r.url().includes('/stream')) return;
    problems.push(`request failed: ${r.method()} ${r.url()} ${why}`);
  });
  page.on('response', r => {
    if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.request().method()} ${r.url()}`);
  });
  return page;
}

// What the page shows when a step failed, for the failure's message: the view, the thread's
// status, the messages (their classes) and any error the page shows.
export async function pageState(page) {
  if (!page) return null;
  try {
    return await page.evaluate(() => ({
      url: location.href,
      status: document.querySelector('#thread-status')?.textContent ?? null,
      messages: [...document.querySelectorAll('#messages .msg')].map(m => m.className),
      error: document.querySelector('.error, #error')?.textContent ?? null,
    }));
  } catch (e) {
    return { unreadable: e.message.split('\n')[0] };
  }
}

// Picks an assistant in the start form and waits for the page to fill the input with its keys
// (its schema loaded); with `input`, then replaces that with `input`, typed.
export async function pickAssistant(page, id, input) {
  await page.select('#start-graph', id);
  await page.waitForNetworkIdle({ idleTime: 200 });
  if (input === undefined) return;
  await page.$eval('#start-input', e => { e.value = ''; });
  await page.type('#start-input', input);
}
