/**
 * The application plugins: the notebook tracker the renderer's Stop and Fork buttons use, and the
 * TEA sidebar with its main-area trajectory panels.
 */

import {
  ILabShell,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { MainAreaWidget } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { watchAgentCells } from './cells';
import { bindNotebook, insertCellBelow, setTracker } from './context';
import { IRunMeta, forkCommand } from './model';
import { watchLiveRuns } from './orphans';
import { OpenTrajectory, TeaSidebar, openRunLinks } from './sidebar';
import { IViewHost, TrajectoryView } from './view';

const ICON = new LabIcon({
  name: 'tea-notebook:icon',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24">' +
    '<path class="jp-icon3" fill="#616161" d="M4 6h13v7a5 5 0 0 1-5 5H9a5 5 0 0 1-5-5V6zm13 2h1.5a2.5 2.5 0 0 1 0 5H17v-2h1.5a.5.5 0 0 0 0-1H17V8zM3 20h15v1.5H3z"/>' +
    '</svg>'
});

const tracking: JupyterFrontEndPlugin<void> = {
  id: 'tea-notebook-jupyterlab:tracker',
  description: 'Lets trajectory outputs find their notebook (Stop and Fork buttons); agent cells and their approval bars.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker) => {
    setTracker(tracker, app);
    watchLiveRuns(tracker); // a page reloaded mid-run puts a live view back in its cell
    watchAgentCells(tracker); // an agent's proposed cells, their badges and approval bars (issue 29)
  }
};

const sidebar: JupyterFrontEndPlugin<void> = {
  id: 'tea-notebook-jupyterlab:sidebar',
  description: 'The TEA sidebar: the workspace of the current notebook kernel.',
  autoStart: true,
  requires: [INotebookTracker, ILabShell],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker, shell: ILabShell) => {
    const open: OpenTrajectory = (run, data, metadata, notebook) => {
      const content = new Widget();
      content.addClass('jp-TeaTrajectory');
      content.addClass('jp-TeaTrajectoryPanel');
      const meta = (metadata['application/vnd.tea.trajectory+json'] ?? {}) as IRunMeta;
      // tied to the notebook it came from: context, Fork and "edit and fork" use its kernel and cells
      const host: IViewHost = notebook
        ? { fork: (step: number) => void insertCellBelow(content.node, forkCommand(run, step), true) }
        : {};
      const view = new TrajectoryView(host);
      content.node.append(view.node);
      if (notebook) {
        bindNotebook(content.node, notebook);
      }
      view.update(data, meta);
      const panel = new MainAreaWidget({ content });
      panel.id = `tea-run-${run}`;
      panel.title.label = `run ${run.slice(0, 8)}`;
      panel.title.icon = ICON;
      panel.title.closable = true;
      shell.add(panel, 'main');
      shell.activateById(panel.id);
      requestAnimationFrame(() => view.relayout());
    };
    const widget = new TeaSidebar(tracker, open);
    openRunLinks(open); // a branches table's rows, an evaluation table's run ids
    widget.title.icon = ICON;
    shell.add(widget, 'left', { rank: 600 });
  }
};

export default [tracking, sidebar];
