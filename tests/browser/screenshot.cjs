#!/usr/bin/env node
// Saves a picture of a status page, as the README's (docs/images/): waits
// until the page's plots are drawn, then a PNG of the whole page, or of its
// top down to the end of the element UNTIL (a CSS selector).
//
//   NODE_PATH=build/tests/browser_npm/node_modules \
//     node tests/browser/screenshot.cjs http://127.0.0.1:8080/sweeps/1 docs/images/study.png '#plots'
//
// playwright-core comes from the browser test's pinned install (the build
// tree's tests/browser_npm); the browser is Debian's chromium
// (SCALESWEEP_CHROMIUM overrides /usr/bin/chromium).
'use strict';
const { chromium } = require('playwright-core');

const [url, out, until] = process.argv.slice(2);
if (!url || !out) {
  console.error('usage: screenshot.cjs URL OUT.png [UNTIL_SELECTOR]');
  process.exit(2);
}

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.SCALESWEEP_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  try {
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
    await page.goto(url);
    // a sweep page: its plots; a run page: its curve
    const sel = url.includes('/runs/') ? '#chart-run canvas' : '#chart-frontier canvas';
    await page.waitForSelector(sel, { timeout: 60000 });
    await page.waitForTimeout(1000); // the last data requests settle
    let clip;
    if (until) {
      const bottom = await page.$eval(until, (e) => e.getBoundingClientRect().bottom + window.scrollY);
      clip = { x: 0, y: 0, width: 1280, height: Math.ceil(bottom) + 8 };
    }
    await page.screenshot({ path: out, fullPage: true, clip });
    console.log(`screenshot: ${out}`);
  } finally {
    await browser.close();
  }
})().catch((e) => {
  console.error(`screenshot: ${e.message}`);
  process.exit(1);
});
